"""Prometheus HTTP API responses -> series with typed samples (pure: bytes or JSON in, frames out).

A `SeriesSet` is what one query returned: the label set of each series, and one long frame of
samples `(sid, ts, value, text)` where `sid` indexes the label list. `text` is the value as
written where it was read as text (the `json` path, OpenMetrics files), so a refused value is
quarantined with its raw text; on the fast path every value parsed as a float and `text` is null.

Speed: a range-selector answer is tens of MB of JSON, and `json.loads` of it alone takes longer
than this whole path from JSON to parquet (bench/RESULTS.md, "Ingest from Prometheus"), so
`parse_body` decodes only the *skeleton* (status and label sets) with `json`, and hands the
`"values":[[t,"v"],...]` arrays, rewritten as CSV lines `t,"v"`, to polars' CSV reader. Anything
unexpected (pretty-printed JSON, a vector, a value that is not a float) falls back to the plain
`json` path, which gives the same samples.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import polars as pl

from gpuwaste.warehouse.schema import UTC_TS

SAMPLE_SCHEMA = pl.Schema(
    {"sid": pl.UInt32(), "ts": UTC_TS, "value": pl.Float64(), "text": pl.String()}
)

_VALUES_KEY = b'"values":['
_PLACEHOLDER = b'"values":0'


class ResponseError(ValueError):
    """The body is not a successful Prometheus API answer (message says why)."""


@dataclass(frozen=True)
class SeriesSet:
    """Series of one query: `labels[sid]` and the samples of every series in one frame."""

    labels: list[dict[str, str]]
    samples: pl.DataFrame  # SAMPLE_SCHEMA
    result_type: str = "matrix"  # the answer's data.resultType: "matrix" or "vector"

    @property
    def n_samples(self) -> int:
        return self.samples.height

    @staticmethod
    def empty() -> SeriesSet:
        return SeriesSet([], pl.DataFrame(schema=SAMPLE_SCHEMA))


MIN_TS_S, MAX_TS_S = -62_135_596_800.0, 253_402_300_799.0  # years 1 to 9999, as datetime


def _ts_in_range(ts_s: pl.Series) -> bool:
    """False for a NaN, infinite or out-of-range timestamp (it would overflow microseconds)."""
    ok = ts_s.is_finite() & (ts_s >= MIN_TS_S) & (ts_s <= MAX_TS_S)
    return bool(ok.fill_null(False).all())


def _typed(sid: pl.Series, ts_s: pl.Series, text: pl.Series) -> pl.DataFrame:
    """Seconds-as-float and value text -> SAMPLE_SCHEMA (unparseable values become null)."""
    if not _ts_in_range(ts_s.cast(pl.Float64)):
        raise ResponseError("a sample timestamp is not a number of seconds in years 1-9999")
    df = pl.DataFrame({"sid": sid, "ts": ts_s, "text": text})
    return df.select(
        pl.col("sid").cast(pl.UInt32),
        (pl.col("ts").cast(pl.Float64) * 1_000_000).round().cast(pl.Int64).cast(UTC_TS).alias("ts"),
        pl.col("text").cast(pl.Float64, strict=False).alias("value"),
        pl.col("text").cast(pl.String),
    )


def series_from_result(result: Sequence[dict[str, Any]]) -> SeriesSet:
    """A decoded `data.result` list (matrix `values` or vector `value`) -> SeriesSet."""
    labels: list[dict[str, str]] = []
    sids: list[int] = []
    ts: list[float] = []
    text: list[str] = []
    for i, item in enumerate(result):
        if not isinstance(item, dict) or not isinstance(item.get("metric"), dict):
            raise ResponseError(f"result item {i} has no 'metric' object")
        labels.append({str(k): str(v) for k, v in item["metric"].items()})
        if "values" in item:
            points = item["values"] or []
        elif "value" in item:
            points = [item["value"]]
        else:
            points = []
        if not points:
            continue
        try:
            t, v = zip(*points, strict=True)
        except (TypeError, ValueError):
            raise ResponseError(f"result item {i} has malformed sample pairs") from None
        ts.extend(t)
        text.extend(str(x) for x in v)
        sids.extend([i] * len(t))
    if not ts:
        return SeriesSet(labels, pl.DataFrame(schema=SAMPLE_SCHEMA))
    return SeriesSet(
        labels,
        _typed(
            pl.Series(sids, dtype=pl.UInt32),
            pl.Series(ts, dtype=pl.Float64, strict=False),  # not a number: null, refused below
            pl.Series(text, dtype=pl.String),
        ),
    )


def _check_envelope(payload: Any) -> list[dict[str, Any]]:
    if not isinstance(payload, dict):
        raise ResponseError("the body is not a JSON object")
    if payload.get("status") != "success":
        kind = payload.get("errorType", "error")
        raise ResponseError(f"{kind}: {payload.get('error', 'status is not success')}")
    data = payload.get("data")
    # a tuple, not a set: a resultType that is a list is unhashable (found by fuzzing)
    if not isinstance(data, dict) or data.get("resultType") not in ("matrix", "vector"):
        raise ResponseError("data.resultType is neither matrix nor vector")
    result = data.get("result")
    if not isinstance(result, list):
        raise ResponseError("data.result is not a list")
    return result


def parse_payload(payload: Any) -> SeriesSet:
    """A decoded API answer (`{"status": "success", "data": {...}}`) -> SeriesSet."""
    result = series_from_result(_check_envelope(payload))
    return replace(result, result_type=str(payload["data"]["resultType"]))


_MARKER = -1e300  # a "timestamp" no real sample has: separates the series in the CSV
_MARKER_LINE = b"\n-1e300,0\n"


def _split_values(body: bytes) -> tuple[list[memoryview], list[memoryview]] | None:
    """(skeleton parts, values arrays): every `"values":[[t,"v"],...]` cut out of the body.

    An array's slice is its inside without the outer brackets (`t,"v"],[t,"v"`), a memoryview:
    nothing is copied until the CSV is assembled.
    """
    view = memoryview(body)
    parts: list[memoryview] = []
    arrays: list[memoryview] = []
    pos = 0
    while True:
        i = body.find(_VALUES_KEY, pos)
        if i < 0:
            break
        inner = i + len(_VALUES_KEY)
        if body.startswith(b"]", inner):  # "values":[]
            arrays.append(view[inner:inner])
            end = inner + 1
        elif body.startswith(b"[", inner):
            close = body.find(b"]]", inner)
            if close < 0:
                return None
            arrays.append(view[inner + 1 : close])
            end = close + 2
        else:
            return None
        parts.append(view[pos:i])
        parts.append(memoryview(_PLACEHOLDER))
        pos = end
    if not arrays:
        return None
    parts.append(view[pos:])
    return parts, arrays


def _fast(body: bytes) -> SeriesSet | None:
    """The compact matrix answer Prometheus writes -> SeriesSet, or None to use plain `json`."""
    split = _split_values(body)
    if split is None:
        return None
    parts, arrays = split
    try:
        skeleton = json.loads(b"".join(parts))
        result = _check_envelope(skeleton)
    except (ValueError, UnicodeDecodeError):
        return None
    if skeleton["data"]["resultType"] != "matrix":
        return None
    if len(result) != len(arrays) or any(
        not isinstance(r, dict) or r.get("values") != 0 or not isinstance(r.get("metric"), dict)
        for r in result
    ):
        return None
    labels = [{str(k): str(v) for k, v in r["metric"].items()} for r in result]
    filled = [i for i, a in enumerate(arrays) if len(a)]
    if not filled:
        return SeriesSet(labels, pl.DataFrame(schema=SAMPLE_SCHEMA))
    # `t,"v"],[t,"v"` -> lines `t,"v"`; a marker line between series; quoted values are CSV.
    csv = _MARKER_LINE.join(arrays[i] for i in filled).replace(b"],[", b"\n")
    try:
        df = pl.read_csv(
            csv,
            has_header=False,
            new_columns=["ts", "value"],
            schema_overrides={"ts": pl.Float64, "value": pl.Float64},
        )
    except Exception:  # polars raises ComputeError / NoDataError on anything odd
        return None
    if df.width != 2 or df["ts"].null_count() or df["value"].null_count():
        return None
    sid_of = pl.Series(np.asarray(filled, dtype=np.uint32))
    marker = pl.col("ts") < _MARKER / 10
    framed = df.with_columns(marker.cum_sum().alias("k")).filter(~marker)
    if framed["k"].max() != len(filled) - 1 or not _ts_in_range(framed["ts"]):
        return None  # the plain path gives the error
    samples = framed.select(
        sid_of.gather(framed["k"]).alias("sid"),
        (pl.col("ts") * 1_000_000).round().cast(pl.Int64).cast(UTC_TS).alias("ts"),
        "value",
        pl.lit(None, dtype=pl.String).alias("text"),
    )
    return SeriesSet(labels, samples)


def parse_body(body: bytes) -> SeriesSet:
    """Raw bytes of an `/api/v1/query` or `/api/v1/query_range` answer -> SeriesSet."""
    fast = _fast(body)
    if fast is not None:
        return fast
    try:
        payload = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ResponseError(f"the body is not JSON ({exc})") from None
    return parse_payload(payload)


def concat_sets(sets: Iterable[SeriesSet]) -> SeriesSet:
    """Several answers for the same metric (e.g. a split window) -> one SeriesSet."""
    labels: list[dict[str, str]] = []
    frames: list[pl.DataFrame] = []
    for s in sets:
        offset = len(labels)
        labels.extend(s.labels)
        if s.samples.height:
            frames.append(s.samples.with_columns(pl.col("sid") + offset))
    if not frames:
        return SeriesSet(labels, pl.DataFrame(schema=SAMPLE_SCHEMA))
    return SeriesSet(labels, pl.concat(frames))
