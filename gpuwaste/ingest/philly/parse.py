"""Parse the Microsoft Philly trace (msr-fiddle/philly-traces). Pure: text or lines in, rows out.

The five files and their quirks (docs/philly-trace.md):

- `cluster_job_log`: one JSON array of jobs. `status` Pass -> passed, Killed -> killed, Failed ->
  unsuccessful; `vc` (hash) -> vc; `user` (hash) -> user. Times have no zone: they are local time
  in the trace's zone (America/Los_Angeles); in the repeated hour of the 2017-11-05 fall-back the
  first (PDT) reading is taken, except that an attempt's end that would fall before its start is
  read as the second (PST) one. Each attempt becomes `job_gpus` rows (attempt = its index in the
  list; host = `ip`; gpu = K of `gpuK`; GPU lists need not be contiguous); an attempt whose start
  or end is the string `"None"` has no interval and gives no rows. `gpus` is the number of GPUs
  of the first attempt (as the trace's notebook does); a job with no attempts is kept, with
  gpus = 0 and no `job_gpus` rows. start_ts / end_ts: first start / last end over attempts.
- `cluster_gpu_util`: `time,machineId,gpu0_util,...,gpu7_util`; data rows end with a trailing
  comma (11 fields against 10 names); some rows have 18 fields, of which `row[0:2] +
  row[2:][::2]` are kept; `NA` is no sample. Time `YYYY-MM-DD HH:MM:SS PDT|PST`: the suffix
  decides the UTC offset (-7 h / -8 h), so the repeated fall-back hour stays two distinct hours.
- `cluster_cpu_util`: `time,machine_id,cpu_util` (percent or `NA`).
- `cluster_mem_util`: `time,machine_id,mem_total,mem_free`; used share = (total - free) / total;
  rows with `NA` or total 0 are no sample.
- `cluster_machine_list` is known to be wrong (issue #8) and is not used: GPU counts come from
  the utilization and job data.

Refused records (with file:line or job index, and a reason): a wrong field count, an unparseable
time or zone suffix, a value that is not a number or outside its range, an attempt that ends
before it starts, a GPU name that is not `gpuK`, a job without id or with an unknown status.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import numpy as np
import polars as pl

from gpuwaste.ingest.times import TimeBounds
from gpuwaste.warehouse import gpu_from
from gpuwaste.warehouse.bookkeeping import Refused
from gpuwaste.warehouse.schema import JOB_GPUS, JOBS, UTC_TS, conform

SOURCE = "philly"
JOB_LOG = "cluster_job_log"
GPU_UTIL = "cluster_gpu_util"
CPU_UTIL = "cluster_cpu_util"
MEM_UTIL = "cluster_mem_util"

STATUS_MAP = {"Pass": "passed", "Killed": "killed", "Failed": "unsuccessful"}
ZONE_OFFSET_H = {"PDT": 7, "PST": 8, "UTC": 0, "GMT": 0}
N_GPU_COLS = 8
BLANK = " \t\r"  # a line of only these characters is no record

HEADERS: dict[str, tuple[str, ...]] = {
    GPU_UTIL: ("time", "machineid", *(f"gpu{i}_util" for i in range(N_GPU_COLS))),
    CPU_UTIL: ("time", "machine_id", "cpu_util"),
    MEM_UTIL: ("time", "machine_id", "mem_total", "mem_free"),
}

# The warehouse's own column lists (without the partition column), in the same order.
JOBS_SCHEMA: dict[str, pl.DataType] = dict(JOBS.stored_columns)
# Philly's GPUs are whole GPUs of no recorded model: no MIG instance, profile or model columns;
# the trace names them itself (gpu_from = trace).
JOB_GPUS_SCHEMA: dict[str, pl.DataType] = {
    k: v
    for k, v in JOB_GPUS.stored_columns.items()
    if k not in ("gpu_instance", "mig_profile", "gpu_model", "gpu_from")
}
REFUSED_SCHEMA: dict[str, pl.DataType] = {
    "location": pl.String(),
    "reason": pl.String(),
    "raw": pl.String(),
}


class PhillyFormatError(ValueError):
    """The file is not the Philly trace file it should be (one sentence, no file name)."""


# --------------------------------------------------------------------------- job log


@dataclass
class PhillyJobs:
    jobs: pl.DataFrame
    job_gpus: pl.DataFrame
    refused: list[Refused] = field(default_factory=list)
    accepted: int = 0
    attempts_without_interval: int = 0


def _local(text: str, tz: ZoneInfo, fold: int = 0) -> datetime:
    try:
        naive = datetime.strptime(text.strip(), "%Y-%m-%d %H:%M:%S")
    except ValueError:
        raise ValueError(f"unparseable time: {text[:40]!r}") from None
    return naive.replace(tzinfo=tz, fold=fold).astimezone(UTC)


def _opt_time(value: Any, tz: ZoneInfo, fold: int = 0) -> datetime | None:
    if value is None or value == "None" or value == "":
        return None
    if not isinstance(value, str):
        raise ValueError(f"time not a string: {value!r}")
    return _local(value, tz, fold)


def _gpu_index(name: Any) -> int:
    if not isinstance(name, str) or not name.startswith("gpu") or not name[3:].isdigit():
        raise ValueError(f"GPU name not gpuK: {name!r}")
    k = int(name[3:])
    if k > 4096:
        raise ValueError(f"GPU index out of range: {k}")
    return k


def _job(
    obj: Any, tz: ZoneInfo, times: TimeBounds = TimeBounds()
) -> tuple[dict[str, Any], list[tuple[int, str, int, datetime, datetime]], int]:
    """One job's row, its (attempt, host, gpu, start, end) rows, attempts without an interval.
    A time `times` does not believe refuses the job (ValueError with the reason)."""
    if not isinstance(obj, dict):
        raise ValueError("job is not a JSON object")
    job_id = obj.get("jobid")
    if not isinstance(job_id, str) or not job_id:
        raise ValueError("no jobid")
    status = obj.get("status")
    if status not in STATUS_MAP:
        raise ValueError(f"unknown status: {status!r}")
    submit = _opt_time(obj.get("submitted_time"), tz)
    attempts = obj.get("attempts") or []
    if not isinstance(attempts, list):
        raise ValueError("attempts is not a list")
    rows: list[tuple[int, str, int, datetime, datetime]] = []
    starts: list[datetime] = []
    ends: list[datetime] = []
    first_gpus = 0
    no_interval = 0
    for a_idx, att in enumerate(attempts):
        if not isinstance(att, dict):
            raise ValueError(f"attempt not a JSON object: attempt {a_idx}")
        start = _opt_time(att.get("start_time"), tz)
        end = _opt_time(att.get("end_time"), tz)
        if start is not None and end is not None and end < start:
            # The repeated fall-back hour: read the end as its second (PST) occurrence.
            end2 = _opt_time(att.get("end_time"), tz, fold=1)
            if end2 is not None and end2 >= start:
                end = end2
            else:
                raise ValueError(f"attempt ends before it starts: attempt {a_idx}")
        pairs: list[tuple[str, int]] = []
        detail = att.get("detail") or []
        if not isinstance(detail, list):
            raise ValueError(f"detail not a list: attempt {a_idx}")
        for d in detail:
            if not isinstance(d, dict) or not isinstance(d.get("ip"), str):
                raise ValueError(f"detail without ip: attempt {a_idx}")
            gpus = d.get("gpus") or []
            if not isinstance(gpus, list):
                raise ValueError(f"gpus not a list: attempt {a_idx}")
            pairs.extend((d["ip"], _gpu_index(g)) for g in gpus)
        if a_idx == 0:
            first_gpus = len(pairs)
        if start is not None:
            starts.append(start)
        if end is not None:
            ends.append(end)
        if start is None or end is None:
            no_interval += 1
            continue
        for host, gpu in dict.fromkeys(pairs):
            rows.append((a_idx, host, gpu, start, end))
    for t in (submit, *starts, *ends):
        if (why := times.problem(t)) is not None:
            raise ValueError(why)
    job = {
        "job_id": job_id,
        "user": obj.get("user") if isinstance(obj.get("user"), str) else None,
        "vc": obj.get("vc") if isinstance(obj.get("vc"), str) else None,
        "name": None,
        "state": STATUS_MAP[status],
        "raw_state": status,
        "submit_ts": submit,
        "start_ts": min(starts) if starts else None,
        "end_ts": max(ends) if ends else None,
        "gpus": first_gpus,
        "is_debug": False,
        "source": SOURCE,
    }
    return job, rows, no_interval


def parse_job_log(
    text: str,
    timezone: str = "America/Los_Angeles",
    location: str = JOB_LOG,
    times: TimeBounds = TimeBounds(),
) -> PhillyJobs:
    """Jobs and job_gpus from the JSON job log; a malformed job, or one with a time `times`
    does not believe, is refused, the others kept."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise PhillyFormatError(f"not a JSON array of jobs ({exc})") from None
    if not isinstance(data, list):
        raise PhillyFormatError("not a JSON array of jobs (the top level is not a list)")
    tz = ZoneInfo(timezone)
    jobs: list[dict[str, Any]] = []
    gpu_rows: list[tuple[str, int, str, int, datetime, datetime]] = []
    refused: list[Refused] = []
    no_interval = 0
    seen: set[str] = set()
    for i, obj in enumerate(data):
        try:
            job, rows, n = _job(obj, tz, times)
        except (ValueError, TypeError, OverflowError) as exc:
            refused.append(Refused(f"{location}:job {i}", str(exc), json.dumps(obj)[:4096]))
            continue
        if job["job_id"] in seen:
            refused.append(
                Refused(f"{location}:job {i}", "duplicate jobid", json.dumps(obj)[:4096])
            )
            continue
        seen.add(job["job_id"])
        jobs.append(job)
        no_interval += n
        gpu_rows.extend((job["job_id"], *r) for r in rows)
    jobs_df = pl.DataFrame(jobs, schema=JOBS_SCHEMA) if jobs else pl.DataFrame(schema=JOBS_SCHEMA)
    gpus_df = conform(
        pl.DataFrame(gpu_rows, schema=JOB_GPUS_SCHEMA, orient="row").with_columns(
            pl.lit(gpu_from.TRACE).alias("gpu_from")
        ),
        JOB_GPUS,
        stored=True,
    )
    return PhillyJobs(
        jobs=jobs_df,
        job_gpus=gpus_df,
        refused=refused,
        accepted=len(jobs),
        attempts_without_interval=no_interval,
    )


# --------------------------------------------------------------------- utilization CSVs


def check_header(kind: str, first_line: str) -> None:
    """Refuse a file whose header is not the one of `kind` (names compared without case/spaces)."""
    names = tuple(n.strip().lower() for n in first_line.rstrip("\r\n").split(","))
    if names and names[-1] == "":
        names = names[:-1]
    want = HEADERS[kind]
    if names != want:
        raise PhillyFormatError(
            f"not the Philly {kind} file: its header is {first_line.strip()[:120]!r}, "
            f"expected {','.join(want)!r}"
        )


def _ts_expr(col: str, timezone: str) -> tuple[pl.Expr, pl.Expr]:
    """(UTC timestamp or null, problem or null) from `YYYY-MM-DD HH:MM:SS PDT|PST`."""
    s = pl.col(col)
    naive = s.str.slice(0, 19).str.strptime(pl.Datetime("us"), "%Y-%m-%d %H:%M:%S", strict=False)
    zone = s.str.slice(19).str.strip_chars()
    offset = pl.lit(None, dtype=pl.Int64())
    for name, hours in ZONE_OFFSET_H.items():
        offset = pl.when(zone == name).then(pl.lit(hours)).otherwise(offset)
    with_suffix = (naive + pl.duration(hours=offset)).dt.replace_time_zone("UTC")
    no_suffix = naive.dt.replace_time_zone(
        timezone, ambiguous="earliest", non_existent="null"
    ).dt.convert_time_zone("UTC")
    ts = pl.when(zone == "").then(no_suffix).otherwise(with_suffix).cast(UTC_TS)
    problem = (
        pl.when(naive.is_null() | (s.str.len_chars() > 24))
        .then(pl.lit("unparseable time"))
        .when((zone != "") & offset.is_null())
        .then(pl.lit("unknown time zone suffix"))
        .when(ts.is_null())
        .then(pl.lit("nonexistent local time"))
        .otherwise(pl.lit(None, dtype=pl.String()))
    )
    return ts, problem


def _problem(shape_ok: pl.Expr, *checks: tuple[pl.Expr, str]) -> pl.Expr:
    """A row's first problem, or null: the field count, the time, the machine id, then `checks`
    (condition, reason) in order; shared by the three utilization files."""
    chain = (
        pl.when(~shape_ok)
        .then(pl.lit("wrong field count: ") + pl.col("nfields").cast(pl.String))
        .when(pl.col("ts_problem").is_not_null())
        .then(pl.col("ts_problem"))
        .when(pl.col("host").is_null() | (pl.col("host") == ""))
        .then(pl.lit("no machine id"))
    )
    for cond, reason in checks:
        chain = chain.when(cond).then(pl.lit(reason))
    return chain.otherwise(pl.lit(None, dtype=pl.String())).alias("problem")


def _refused_frame(df: pl.DataFrame, location: str) -> pl.DataFrame:
    return df.filter(pl.col("problem").is_not_null()).select(
        (pl.lit(location + ":") + pl.col("lineno").cast(pl.String)).alias("location"),
        pl.col("problem").alias("reason"),
        pl.col("line").alias("raw"),
    )


def _numbers(
    df: pl.DataFrame, raw: list[str], out: list[str], lo: float | None, hi: float | None
) -> pl.DataFrame:
    """Add float columns `out` from text columns `raw` (NA/empty -> null) and `_bad` (any value
    that is neither a number nor NA, or lies outside [lo, hi]). Step by step, so that polars
    evaluates each piece once."""
    df = df.with_columns(pl.col(r).str.strip_chars() for r in raw)
    df = df.with_columns(
        pl.when(pl.col(r).is_null() | (pl.col(r) == "") | (pl.col(r) == "NA"))
        .then(None)
        .otherwise(pl.col(r).cast(pl.Float64, strict=False))
        .alias(o)
        for r, o in zip(raw, out, strict=True)
    )
    checks = []
    for r, o in zip(raw, out, strict=True):
        text_ok = pl.col(r).is_null() | (pl.col(r) == "") | (pl.col(r) == "NA")
        bad = ~text_ok & (pl.col(o).is_null() | ~pl.col(o).is_finite())  # NaN, inf: refused
        if lo is not None:
            bad = bad | (pl.col(o) < lo).fill_null(False)
        if hi is not None:
            bad = bad | (pl.col(o) > hi).fill_null(False)
        checks.append(bad)
    return df.with_columns(pl.any_horizontal(checks).alias("_bad")).drop(raw)


def _split(lines: pl.DataFrame, timezone: str) -> pl.DataFrame:
    """lineno, line, f (fields), nfields, time, host, ts, ts_problem."""
    df = lines.with_columns(pl.col("line").str.split(",").alias("f"))
    df = df.with_columns(
        pl.col("f").list.len().alias("nfields"),
        pl.col("f").list.get(0, null_on_oob=True).alias("time"),
        pl.col("f").list.get(1, null_on_oob=True).str.strip_chars().alias("host"),
    )
    # One row per machine per minute: parse each distinct time string once, then join.
    ts, ts_problem = _ts_expr("time", timezone)
    times = (
        df.select(pl.col("time").unique())
        .with_columns(ts.alias("ts"))
        .with_columns(ts_problem.alias("ts_problem"))
    )
    return df.join(times, on="time", how="left", nulls_equal=True, maintain_order="left")


def _last_empty(k: int) -> pl.Expr:
    return pl.col("f").list.get(k, null_on_oob=True) == ""


def parse_gpu_util_lines(
    lines: pl.DataFrame, location: str = GPU_UTIL, timezone: str = "America/Los_Angeles"
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Rows of `cluster_gpu_util` (columns `lineno`, `line`) -> long samples, refused rows.

    Samples: host, gpu, ts, util, lineno (one row per non-NA value; lineno, the line in the
    file, decides which of two rows for one machine and minute wins). Refused: location, reason,
    raw.
    """
    df = _split(lines, timezone)
    n = pl.col("nfields")
    df = df.with_columns(
        ((n == 18) | ((n == 19) & _last_empty(18))).alias("paired"),
        ((n == 10) | ((n == 11) & _last_empty(10))).alias("plain"),
    )
    raw = [f"_r{k}" for k in range(N_GPU_COLS)]
    df = df.with_columns(
        pl.when(pl.col("paired"))
        .then(pl.col("f").list.get(2 + 2 * k, null_on_oob=True))
        .otherwise(pl.col("f").list.get(2 + k, null_on_oob=True))
        .alias(raw[k])
        for k in range(N_GPU_COLS)
    ).drop("f")
    df = _numbers(df, raw, [f"g{k}" for k in range(N_GPU_COLS)], 0.0, 100.0)
    df = df.with_columns(
        _problem(
            pl.col("paired") | pl.col("plain"),
            (pl.col("_bad"), "utilization not a number in 0-100"),
        )
    )
    refused = _refused_frame(df, location)
    good = df.filter(pl.col("problem").is_null()).select(
        "host", "ts", "lineno", *(pl.col(f"g{k}") for k in range(N_GPU_COLS))
    )
    long = (
        good.unpivot(index=["host", "ts", "lineno"], variable_name="gpu", value_name="util")
        .drop_nulls("util")
        .with_columns(pl.col("gpu").str.slice(1).cast(pl.Int16))
        .select("host", "gpu", "ts", "util", "lineno")
    )
    return long, refused


def parse_cpu_util_lines(
    lines: pl.DataFrame, location: str = CPU_UTIL, timezone: str = "America/Los_Angeles"
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Rows of `cluster_cpu_util` -> (host, ts, cpu_util, lineno) for non-NA values, refused."""
    df = _split(lines, timezone)
    n = pl.col("nfields")
    df = df.with_columns(
        ((n == 3) | ((n == 4) & _last_empty(3))).alias("shape_ok"),
        pl.col("f").list.get(2, null_on_oob=True).alias("_r"),
    ).drop("f")
    df = _numbers(df, ["_r"], ["cpu_util"], 0.0, 100.0)
    df = df.with_columns(
        _problem(pl.col("shape_ok"), (pl.col("_bad"), "cpu utilization not a number in 0-100"))
    )
    refused = _refused_frame(df, location)
    good = (
        df.filter(pl.col("problem").is_null())
        .drop_nulls("cpu_util")
        .select("host", "ts", "cpu_util", "lineno")
    )
    return good, refused


def parse_mem_util_lines(
    lines: pl.DataFrame, location: str = MEM_UTIL, timezone: str = "America/Los_Angeles"
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Rows of `cluster_mem_util` -> (host, ts, mem_used_frac, lineno), refused rows.

    Rows with NA or mem_total == 0 are skipped (no sample), not refused.
    """
    df = _split(lines, timezone)
    n = pl.col("nfields")
    df = df.with_columns(
        ((n == 4) | ((n == 5) & _last_empty(4))).alias("shape_ok"),
        pl.col("f").list.get(2, null_on_oob=True).alias("_t"),
        pl.col("f").list.get(3, null_on_oob=True).alias("_f"),
    ).drop("f")
    df = _numbers(df, ["_t", "_f"], ["total", "free"], 0.0, None)
    df = df.with_columns(
        _problem(
            pl.col("shape_ok"),
            (pl.col("_bad"), "memory not a non-negative number"),
            ((pl.col("free") > pl.col("total")).fill_null(False), "mem_free larger than mem_total"),
        )
    )
    refused = _refused_frame(df, location)
    return _mem_rows(df.filter(pl.col("problem").is_null())), refused


def _mem_rows(ok: pl.DataFrame) -> pl.DataFrame:
    """Accepted memory rows -> (host, ts, mem_used_frac, lineno); NA or mem_total == 0 is no
    sample (skipped). One rule for the exact parser and the fast path."""
    return (
        ok.filter(pl.col("total").is_not_null() & pl.col("free").is_not_null())
        .filter(pl.col("total") > 0)
        .select(
            "host",
            "ts",
            ((pl.col("total") - pl.col("free")) / pl.col("total")).alias("mem_used_frac"),
            "lineno",
        )
    )


# ------------------------------------------------------------------ fast path for clean rows

# kind -> (fields read, value positions of a plain row, of an 18-field row, text positions)
# kind -> (columns read, the numeric ones, fields of a well-formed row without trailing comma)
_FAST_SHAPES: dict[str, tuple[int, frozenset[int], int]] = {
    GPU_UTIL: (11, frozenset(range(2, 10)), 10),
    CPU_UTIL: (4, frozenset({2}), 3),
    MEM_UTIL: (5, frozenset({2, 3}), 4),
}


def parse_chunk(
    kind: str, data: bytes, first_lineno: int, location: str, timezone: str = "America/Los_Angeles"
) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    """Parse a block of whole lines of a utilization file: (rows, refused, records).

    Clean rows go through polars' CSV reader (multi-threaded); every row that is not plainly
    well-formed (a different number of fields, an unknown zone suffix, a value that is not a
    number in range, a blank line, bytes that are not UTF-8) is handed, with its exact line, to
    the line-by-line parser (`parse_*_lines`), which decides whether it is a sample or refused.
    Both paths give the same rows for the same input.
    """
    slow = {
        GPU_UTIL: parse_gpu_util_lines,
        CPU_UTIL: parse_cpu_util_lines,
        MEM_UTIL: parse_mem_util_lines,
    }[kind]
    n_lines = data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)
    if n_lines == 0:
        good, bad = slow(lines_frame("", first_lineno), location, timezone)
        return good, bad, 0
    # Exact field counts per line, from the positions of newlines and commas (numpy, no split).
    raw = np.frombuffer(data, dtype=np.uint8)
    newlines = np.flatnonzero(raw == 10)
    commas = np.flatnonzero(raw == 44)
    # commas before each line end (the last line may have no newline), differenced per line
    ends = np.append(newlines, len(data)) if len(newlines) < n_lines else newlines
    before = np.searchsorted(commas, ends[:n_lines])
    nfields = np.diff(before, prepend=0) + 1
    # whether each line ends with a comma (before a `\r`): its last field is empty, not `NA`,
    # which the CSV reader also reads as null
    last = ends[:n_lines] - 1
    last = last - (raw[np.maximum(last, 0)] == 13)
    trailing = pl.Series("trailing", (last >= 0) & (raw[np.maximum(last, 0)] == 44))
    width, numeric, counts = _FAST_SHAPES[kind]
    schema = {f"c{i}": pl.Float64() if i in numeric else pl.String() for i in range(width)}
    try:
        df = pl.read_csv(
            data,
            has_header=False,
            new_columns=list(schema),
            schema=schema,
            null_values=["NA"],
            quote_char=None,
            missing_columns="insert",
            truncate_ragged_lines=True,
            raise_if_empty=False,
        )
    except Exception:  # a value that is not a number, bytes not UTF-8: read line by line
        return _slow_block(slow, data, first_lineno, location, timezone)
    if df.height != n_lines:  # blank lines: polars skips them, so line numbers would shift
        return _slow_block(slow, data, first_lineno, location, timezone)
    df = df.with_columns(
        pl.int_range(first_lineno, first_lineno + df.height).alias("lineno"),
        pl.Series("nfields", nfields, dtype=pl.Int64()),
    )
    df = df.rename({"c0": "time", "c1": "host"})
    ts, ts_problem = _ts_expr("time", timezone)
    times = (
        df.select(pl.col("time").unique())
        .with_columns(ts.alias("ts"))
        .with_columns(ts_problem.alias("ts_problem"))
    )
    df = df.join(times, on="time", how="left", nulls_equal=True, maintain_order="left")
    # A row of `counts` fields, or one more whose last is empty (the trailing comma).
    shape = (pl.col("nfields") == counts) | ((pl.col("nfields") == counts + 1) & trailing)
    if kind == GPU_UTIL:  # 18-field rows go line by line
        gcols = [f"g{k}" for k in range(N_GPU_COLS)]
        df = df.rename({f"c{2 + k}": g for k, g in enumerate(gcols)})
        df = _typed_checks(df, gcols, 0.0, 100.0)
    elif kind == CPU_UTIL:
        df = _typed_checks(df.rename({"c2": "cpu_util"}), ["cpu_util"], 0.0, 100.0)
    else:
        df = _typed_checks(df.rename({"c2": "total", "c3": "free"}), ["total", "free"], 0.0, None)
        shape = shape & (pl.col("free") <= pl.col("total")).fill_null(True)
    spaced = pl.col("host").str.contains(" ", literal=True) | pl.col("host").str.contains(
        "\t", literal=True
    )
    clean = (
        shape
        & pl.col("ts_problem").is_null()
        & pl.col("host").is_not_null()
        & ~spaced
        & ~pl.col("_bad")
    )
    df = df.with_columns(clean.fill_null(False).alias("_clean"))
    ok = df.filter(pl.col("_clean"))
    if kind == GPU_UTIL:
        good = pl.concat(
            [
                ok.select(
                    "host",
                    pl.lit(k, dtype=pl.Int16()).alias("gpu"),
                    "ts",
                    pl.col(f"g{k}").alias("util"),
                    "lineno",
                ).filter(pl.col("util").is_not_null())
                for k in range(N_GPU_COLS)
            ]
        )
    elif kind == CPU_UTIL:
        good = ok.drop_nulls("cpu_util").select("host", "ts", "cpu_util", "lineno")
    else:
        good = _mem_rows(ok)
    odd = df.filter(~pl.col("_clean"))["lineno"].to_list()
    if not odd:
        return good, pl.DataFrame(schema=REFUSED_SCHEMA), n_lines
    # Cut out just those lines (newline offsets found with numpy, not by splitting the block).
    ends = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10)
    starts = np.concatenate(([0], ends + 1))
    ends = np.concatenate((ends, [len(data)]))
    picked_lines = [
        data[starts[i - first_lineno] : ends[i - first_lineno]].decode("utf-8", errors="replace")
        for i in odd
    ]
    picked = pl.DataFrame(
        {"lineno": odd, "line": [ln.rstrip("\r") for ln in picked_lines]},
        schema={"lineno": pl.Int64(), "line": pl.String()},
    ).filter(pl.col("line").str.strip_chars(BLANK) != "")  # blank lines are no records
    more, refused = slow(picked, location, timezone)
    records = n_lines - (len(odd) - picked.height)
    return pl.concat([good, more.select(good.columns)]), refused, records


def refuse_times(
    rows: pl.DataFrame, times: TimeBounds, location: str
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The rows of `parse_chunk` (host, ts, ..., lineno) at times `times` believes, and the
    lines of the others refused (location, reason naming the host, raw: host and time; the
    line's text is not kept past the parse)."""
    good, bad = times.split(rows, host="host")
    if bad.height == 0:
        return good, pl.DataFrame(schema=REFUSED_SCHEMA)
    refused = bad.unique(subset="lineno", keep="first", maintain_order=True).select(
        (pl.lit(location + ":") + pl.col("lineno").cast(pl.String)).alias("location"),
        "reason",
        pl.concat_str([pl.col("host"), pl.col("ts").cast(pl.String)], separator=",").alias("raw"),
    )
    return good, refused


def _typed_checks(
    df: pl.DataFrame, cols: list[str], lo: float | None, hi: float | None
) -> pl.DataFrame:
    """`_bad`: any value of `cols` (numbers as polars read them) NaN, infinite or outside [lo, hi]."""
    checks = []
    for c in cols:
        bad = ~pl.col(c).is_finite()
        if lo is not None:
            bad = bad | (pl.col(c) < lo)
        if hi is not None:
            bad = bad | (pl.col(c) > hi)
        checks.append(bad.fill_null(False))
    return df.with_columns(pl.any_horizontal(checks).alias("_bad"))


def _slow_block(
    slow: Callable[[pl.DataFrame, str, str], tuple[pl.DataFrame, pl.DataFrame]],
    data: bytes,
    first_lineno: int,
    location: str,
    timezone: str,
) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    frame = lines_frame(data.decode("utf-8", errors="replace"), first_lineno)
    good, bad = slow(frame, location, timezone)
    return good, bad, frame.height


def lines_frame(text: str, first_lineno: int = 1) -> pl.DataFrame:
    """A small helper for tests and small inputs: text -> (lineno, line), blank lines dropped."""
    rows = [
        (i, ln.rstrip("\r"))
        for i, ln in enumerate(text.split("\n"), start=first_lineno)
        if ln.strip(BLANK)
    ]
    return pl.DataFrame(rows, schema={"lineno": pl.Int64(), "line": pl.String()}, orient="row")
