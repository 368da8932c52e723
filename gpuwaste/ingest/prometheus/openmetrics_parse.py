"""OpenMetrics / Prometheus text exposition -> series by metric name (pure: text in, frames out).

The `openmetrics` file source (and `make demo`) loads DCGM and node-exporter samples from a file
without any server, through the same row builders as the Prometheus source
(`prometheus.rows.gpu_rows` / `host_rows`).

Format rules kept:
- OpenMetrics (text ends with `# EOF`): sample timestamps are in seconds (may be fractional);
  the Prometheus text format (no `# EOF`): timestamps are integer milliseconds.
- A sample without a timestamp takes `default_ts` (a scrape saved to a file: the scrape time);
  with no `default_ts` it is refused.
- `# HELP` / `# TYPE` / `# UNIT` lines and blank lines are skipped; label values may contain
  spaces, commas, braces and the escapes `\\\\`, `\\"`, `\\n`; `, ` and `,` both separate labels;
  a trailing comma is allowed. Anything else (documentation elisions such as `...`, a line cut
  short) is refused with its line number, never guessed at.
- Values are kept as written (`NaN`, `+Inf`, `9.2e+18`): the row builders decide what is valid.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

import polars as pl

from gpuwaste.ingest.prometheus.parse import MAX_TS_S, MIN_TS_S, SAMPLE_SCHEMA, SeriesSet
from gpuwaste.warehouse.bookkeeping import Refused
from gpuwaste.warehouse.schema import UTC_TS

_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|(?=\}))')
_UNESCAPE = re.compile(r"\\(.)")


@dataclass(frozen=True)
class Parsed:
    """Series by metric name, and the lines that were refused."""

    series: dict[str, SeriesSet]
    refused: list[Refused]
    lines: int


def _unescape(value: str) -> str:
    if "\\" not in value:
        return value
    return _UNESCAPE.sub(lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


def parse_labels(text: str) -> dict[str, str] | None:
    """`a="1", b="x y"` (the inside of the braces) -> dict; None when malformed."""
    out: dict[str, str] = {}
    pos = 0
    body = text + "}"  # lookahead anchor for the last label
    end = len(text)
    while pos < end:
        if body[pos:end].strip() == "":
            break
        m = _LABEL.match(body, pos)
        if m is None:
            return None
        out[m.group(1)] = _unescape(m.group(2))
        pos = m.end()
    return out


_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def _split_series(line: str) -> tuple[str, str] | None:
    """`name{labels} rest` -> (series text, rest), honouring braces inside quoted values."""
    brace = line.find("{")
    space = min((i for i in (line.find(" "), line.find("\t")) if i >= 0), default=-1)
    if brace < 0 or (0 <= space < brace):
        if space < 0:
            return None
        return line[:space], line[space:]
    i, n, in_quotes = brace + 1, len(line), False
    while i < n:
        c = line[i]
        if in_quotes:
            if c == "\\":
                i += 1
            elif c == '"':
                in_quotes = False
        elif c == '"':
            in_quotes = True
        elif c == "}":
            return line[: i + 1], line[i + 1 :]
        i += 1
    return None


@dataclass
class Chunk:
    """The samples of one block of lines, in file order: global series id, time in seconds,
    value as written; and the lines refused."""

    sids: list[int]
    ts: list[float]
    values: list[str]
    refused: list[Refused]


# A file may name any number of metric families; those not read are remembered only by name,
# and at most this many names (for the sentence saying what a file holds instead).
MAX_NAMES = 10_000


class TextParser:
    """Exposition text fed block by block (`feed`), each block whole lines, in file order: the
    pure core of `parse_text`, also used by the file source to read a file of any size a block
    at a time. Series ids are global over the blocks, in order of first appearance.

    `openmetrics`: the text ends with `# EOF` (timestamps in seconds, else milliseconds);
    the caller knows it before the first block. With `metrics`, other families' samples are
    checked (a malformed one is refused) but not kept, and their series not remembered (only
    their names, up to MAX_NAMES).
    """

    def __init__(
        self,
        *,
        openmetrics: bool,
        location: str = "<text>",
        default_ts: datetime | None = None,
        metrics: set[str] | None = None,
    ) -> None:
        self.ts_scale = 1.0 if openmetrics else 0.001
        self.default_s = default_ts.timestamp() if default_ts is not None else None
        self.location = location
        self.metrics = metrics
        self.series_ids: dict[str, int] = {}
        self.series_metric: list[str] = []
        self.series_labels: list[dict[str, str]] = []
        self.names: set[str] = set()  # every family with a well-formed series (MAX_NAMES)
        self.names_capped = False
        self._prev_key = ""  # no series yet (a "\x00" sentinel matched a line "\x00 0": fuzzing)
        self._prev_sid = -1
        self._prev_len = 1

    def _name_seen(self, name: str) -> None:
        if name in self.names:
            return
        if len(self.names) < MAX_NAMES:
            self.names.add(name)
        else:
            self.names_capped = True

    def feed(self, lines: list[str], first_lineno: int = 1) -> Chunk:
        """Parse `lines` (line `first_lineno` first).

        A series' samples are consecutive lines, so a line that starts with the previous line's
        series text and a blank is that series: the series text is split and its labels parsed
        once per series, not once per line.
        """
        location, metrics = self.location, self.metrics
        ts_scale, default_s = self.ts_scale, self.default_s
        series_ids = self.series_ids
        sids: list[int] = []
        ts: list[float] = []
        values: list[str] = []
        refused: list[Refused] = []
        prev_key, prev_sid, prev_len = self._prev_key, self._prev_sid, self._prev_len
        for lineno, raw in enumerate(lines, start=first_lineno):
            line = raw.strip()
            if not line or line[0] == "#":
                continue
            if (
                prev_key
                and line.startswith(prev_key)
                and line[prev_len : prev_len + 1] in (" ", "\t")
            ):
                sid, rest = prev_sid, line[prev_len:]
            else:
                head = _split_series(line)
                if head is None:
                    refused.append(Refused(f"{location}:{lineno}", "malformed line", raw))
                    continue
                key, rest = head
                if rest[:1] not in (" ", "\t"):
                    refused.append(Refused(f"{location}:{lineno}", "malformed line", raw))
                    continue
                found = series_ids.get(key)
                if found is None:
                    brace = key.find("{")
                    name = key if brace < 0 else key[:brace]
                    labels = {} if brace < 0 else parse_labels(key[brace + 1 : -1])
                    if not _NAME.fullmatch(name) or labels is None:
                        refused.append(
                            Refused(f"{location}:{lineno}", "malformed series name or labels", raw)
                        )
                        continue
                    self._name_seen(name)
                    if metrics is not None and name not in metrics:
                        found = -1  # not remembered: a file may hold millions of such series
                    else:
                        found = len(self.series_metric)
                        self.series_metric.append(name)
                        self.series_labels.append(labels)
                        series_ids[key] = found
                sid = found
                prev_key, prev_sid, prev_len = key, sid, len(key)
            parts = rest.split()
            if not parts or len(parts) > 2:  # value [timestamp]; exemplars are not kept
                refused.append(Refused(f"{location}:{lineno}", "malformed sample", raw))
                continue
            if len(parts) == 2:
                try:
                    t = float(parts[1]) * ts_scale
                except ValueError:
                    refused.append(Refused(f"{location}:{lineno}", "malformed timestamp", raw))
                    continue
                if not MIN_TS_S <= t <= MAX_TS_S:  # NaN, inf, outside years 1-9999 (fuzzing)
                    refused.append(Refused(f"{location}:{lineno}", "timestamp out of range", raw))
                    continue
            elif default_s is not None:
                t = default_s
            else:
                refused.append(Refused(f"{location}:{lineno}", "sample without timestamp", raw))
                continue
            if sid < 0:  # a family not read: its lines are still checked, as in one piece
                continue
            sids.append(sid)
            ts.append(t)
            values.append(parts[0])
        self._prev_key, self._prev_sid, self._prev_len = prev_key, prev_sid, prev_len
        return Chunk(sids, ts, values, refused)

    def series_sets(self, samples: pl.DataFrame) -> dict[str, SeriesSet]:
        """`samples` (columns of `samples_frame`, global series ids, in file order) -> series
        by metric name, each with every series of its family seen so far."""
        return _group(self.series_metric, self.series_labels, samples)


def samples_frame(chunk: Chunk) -> pl.DataFrame:
    """A chunk's samples as a frame: `sid` (global), `ts` (UTC, µs), `value`, `text`."""
    return pl.DataFrame(
        {"sid": chunk.sids, "ts": chunk.ts, "text": chunk.values},
        schema={"sid": pl.UInt32, "ts": pl.Float64, "text": pl.String},
    ).select(
        "sid",
        (pl.col("ts") * 1_000_000).round().cast(pl.Int64).cast(UTC_TS).alias("ts"),
        pl.col("text").cast(pl.Float64, strict=False).alias("value"),
        "text",
    )


def parse_text(
    text: str,
    *,
    location: str = "<text>",
    default_ts: datetime | None = None,
    metrics: set[str] | None = None,
) -> Parsed:
    """Exposition text -> series by metric name (only `metrics` when given) and refused lines."""
    parser = TextParser(
        openmetrics=text.rstrip().endswith("# EOF"),
        location=location,
        default_ts=default_ts,
        metrics=metrics,
    )
    lines = text.split("\n")
    chunk = parser.feed(lines)
    return Parsed(parser.series_sets(samples_frame(chunk)), chunk.refused, len(lines))


def _group(
    series_metric: list[str], series_labels: list[dict[str, str]], samples: pl.DataFrame
) -> dict[str, SeriesSet]:
    by_metric: dict[str, list[int]] = {}
    for sid, name in enumerate(series_metric):
        by_metric.setdefault(name, []).append(sid)
    out: dict[str, SeriesSet] = {}
    for name, global_sids in by_metric.items():
        local = pl.DataFrame(
            {"sid": global_sids, "local": range(len(global_sids))},
            schema={"sid": pl.UInt32, "local": pl.UInt32},
        )
        frame = samples.join(local, on="sid", how="inner", maintain_order="left").select(
            pl.col("local").alias("sid"), "ts", "value", "text"
        )
        out[name] = SeriesSet([series_labels[s] for s in global_sids], frame.cast(SAMPLE_SCHEMA))
    return out
