"""Generic CSV / parquet exports with a TOML column mapping -> gpu_samples, jobs, job_gpus.

For the exports other clusters and other public traces come in. The mapping file (format in
docs/ingest-files.md) has a `[samples]` table (long format: one row per GPU per time) and/or a
`[jobs]` table, each naming the input column of every warehouse column, and how its times are
written: `time_format = "iso" | "epoch_s" | "epoch_ms"` or a strftime pattern such as
"%d/%m/%Y %H:%M"; times without a zone are read in `timezone` (default UTC).

Pure: `load_mapping(text)`, `split_csv` and `map_samples` / `map_jobs` (frame in, rows +
refused out). The I/O and writes are in `tabular.source`.

Refused (quarantine, file:line for CSV, file:row N for parquet): an unparseable time, a time no
source believes (`ingest.times`: outside the warehouse's days, from the future, before
`[ingest] earliest_time`; a sample's reason names its host), a utilization outside 0-100 or not
a number, a missing host / GPU / job id, a negative GPU count, an end before the start, an
unknown state, an allocation string that does not parse.
"""

from __future__ import annotations

import csv
import io
import tomllib
from collections.abc import Iterable, Iterator
from typing import Annotated, Literal

import polars as pl
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpuwaste.ingest.base import IngestError
from gpuwaste.ingest.slurm_notation import (
    HostListError,
    expand_hostlist,
    expand_indices,
    map_state,
)
from gpuwaste.ingest.times import TimeBounds
from gpuwaste.warehouse.bookkeeping import Refused
from gpuwaste.warehouse.schema import UTC_TS

Kind = Literal["csv", "parquet"]
STATES = ("passed", "killed", "unsuccessful", "running")


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SamplesMapping(_M):
    time: str
    host: str
    gpu: str
    util: str
    mem_used_mib: str | None = None
    mem_total_mib: str | None = None
    job_id: str | None = None
    time_format: str = "iso"
    timezone: str = "UTC"
    util_scale: Annotated[float, Field(gt=0)] = 1.0  # 100 when utilization is a 0-1 ratio
    mem_scale: Annotated[float, Field(gt=0)] = 1.0  # to MiB: 1/1048576 for bytes


class JobsMapping(_M):
    job_id: str
    user: str | None = None
    vc: str | None = None
    name: str | None = None
    submit: str | None = None
    start: str | None = None
    end: str | None = None
    state: str | None = None
    gpus: str | None = None
    hosts: str | None = None  # a host list: `node[01-02]`, `a,b`
    allocation: str | None = None  # per-host GPU indices: `node01:0-3;node02:0,2`
    is_debug: str | None = None
    time_format: str = "iso"
    timezone: str = "UTC"
    # Input state -> passed | killed | unsuccessful | running; unlisted states go through the
    # Slurm names (COMPLETED, CANCELLED, FAILED, ...) and the four names themselves.
    state_map: dict[str, Literal["passed", "killed", "unsuccessful", "running"]] = Field(
        default_factory=dict
    )


class Mapping(_M):
    samples: SamplesMapping | None = None
    jobs: JobsMapping | None = None


class MappingError(ValueError):
    """The mapping file is not valid (one sentence, no file name)."""


def load_mapping(text: str) -> Mapping:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise MappingError(f"not valid TOML ({exc})") from None
    try:
        m = Mapping.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err.get("loc", ()))
        raise MappingError(f"key '{loc}': {err.get('msg', 'invalid')}") from None
    if m.samples is None and m.jobs is None:
        raise MappingError("it has neither a [samples] nor a [jobs] table")
    return m


def _time(col: str, dtype: pl.DataType, fmt: str, tz: str) -> pl.Expr:
    """A UTC timestamp expression for column `col` written as `fmt`."""
    c = pl.col(col)
    if isinstance(dtype, pl.Datetime):
        if dtype.time_zone is None:
            return (
                c.dt.replace_time_zone(tz, ambiguous="earliest", non_existent="null")
                .dt.convert_time_zone("UTC")
                .cast(UTC_TS)
            )
        return c.dt.convert_time_zone("UTC").cast(UTC_TS)
    if fmt in ("epoch_s", "epoch_ms"):
        factor = 1_000_000 if fmt == "epoch_s" else 1_000
        num = c.cast(pl.String).str.strip_chars().cast(pl.Float64, strict=False)
        scale = 1 if fmt == "epoch_s" else 1000
        # years 1-9999 only (a datetime): -99999999999 s (year -1199) crashed map_jobs (fuzzing)
        ok = num.is_finite() & (num > -6.2e10 * scale) & (num < 2.5e11 * scale)
        return (
            pl.when(ok)
            .then((num * factor).round(0).cast(pl.Int64))
            .cast(pl.Datetime("us"))
            .dt.replace_time_zone("UTC")
        )
    s = c.cast(pl.String).str.strip_chars()
    if fmt == "iso":
        n = s.str.replace(r"^(\d{4}-\d\d-\d\d) ", "${1}T").str.replace(r"Z$", "+00:00")
        aware = n.str.to_datetime("%Y-%m-%dT%H:%M:%S%.f%z", time_unit="us", strict=False)
        naive = n.str.to_datetime("%Y-%m-%dT%H:%M:%S%.f", time_unit="us", strict=False)
    else:
        aware = pl.lit(None, dtype=UTC_TS)
        naive = s.str.to_datetime(fmt, time_unit="us", strict=False)
    local = naive.dt.replace_time_zone(tz, ambiguous="earliest", non_existent="null")
    return pl.coalesce(aware.dt.convert_time_zone("UTC"), local.dt.convert_time_zone("UTC")).cast(
        UTC_TS
    )


def _num(col: str) -> pl.Expr:
    return pl.col(col).cast(pl.String).str.strip_chars().cast(pl.Float64, strict=False)


def _missing(df: pl.DataFrame, cols: list[str | None], what: str) -> None:
    absent = [c for c in cols if c is not None and c not in df.columns]
    if absent:
        raise MappingError(
            f"the {what} input has no column {absent[0]!r} named in the mapping "
            f"(its columns: {', '.join(df.columns[:20])})"
        )


def _refused(df: pl.DataFrame, location: str) -> list[Refused]:
    bad = df.filter(pl.col("_problem").is_not_null())
    if bad.height == 0:
        return []
    raw = (
        bad.drop("_problem", "_loc")
        .select(
            pl.concat_str(
                [
                    pl.col(c).cast(pl.String).fill_null("")
                    for c in bad.columns
                    if not c.startswith("_")
                ],
                separator=",",
            )
        )
        .to_series()
    )
    return [
        Refused(f"{location}:{loc}", reason, r)
        for loc, reason, r in zip(bad["_loc"], bad["_problem"], raw, strict=True)
    ]


def map_samples(
    df: pl.DataFrame,
    m: SamplesMapping,
    location: str,
    loc: pl.Expr,
    times: TimeBounds = TimeBounds(),
) -> tuple[pl.DataFrame, list[Refused]]:
    """Input rows -> gpu_samples rows (host, gpu, ts, util, mem_*, job_id) and refused rows;
    a time `times` does not believe is refused."""
    _missing(
        df, [m.time, m.host, m.gpu, m.util, m.mem_used_mib, m.mem_total_mib, m.job_id], "samples"
    )
    ts = _time(m.time, df.schema[m.time], m.time_format, m.timezone)
    util = _num(m.util) * m.util_scale
    gpu = _num(m.gpu)
    mem_used = _num(m.mem_used_mib) * m.mem_scale if m.mem_used_mib else pl.lit(None, pl.Float64)
    mem_total = _num(m.mem_total_mib) * m.mem_scale if m.mem_total_mib else pl.lit(None, pl.Float64)
    host = pl.col(m.host).cast(pl.String).str.strip_chars()
    out = df.with_columns(
        loc.alias("_loc"),
        ts.alias("_ts"),
        util.alias("_util"),
        gpu.alias("_gpu"),
        host.alias("_host"),
        mem_used.alias("_mu"),
        mem_total.alias("_mt"),
    )
    when = times.problem_expr(pl.col("_ts"), host=pl.col("_host"))  # a node's clock: name it
    problem = (
        pl.when(pl.col("_ts").is_null())
        .then(pl.lit("unparseable time"))
        .when(pl.col("_host").is_null() | (pl.col("_host") == ""))
        .then(pl.lit("missing host"))
        .when(when.is_not_null())
        .then(when)
        .when(
            pl.col("_gpu").is_null()
            | (pl.col("_gpu") < 0)
            | (pl.col("_gpu") != pl.col("_gpu").round(0))
            | ~pl.col("_gpu").is_finite()  # NaN, inf (NaN == NaN in polars)
            | (pl.col("_gpu") > 32767)  # stored as Int16
        )
        .then(pl.lit("bad GPU index"))
        .when(
            pl.col("_util").is_null()
            | ~pl.col("_util").is_finite()
            | (pl.col("_util") < 0)
            | (pl.col("_util") > 100)
        )
        .then(pl.lit("utilization not a number in 0-100"))
        .when((pl.col("_mu") < 0) | (pl.col("_mt") < 0))
        .then(pl.lit("negative memory"))
        .when(
            ~pl.col("_mu").is_finite().fill_null(True) | ~pl.col("_mt").is_finite().fill_null(True)
        )
        .then(pl.lit("memory not a number"))
        .otherwise(pl.lit(None, dtype=pl.String()))
    )
    out = out.with_columns(problem.alias("_problem"))
    refused = _refused(out.select(*df.columns, "_loc", "_problem"), location)
    good = out.filter(pl.col("_problem").is_null()).select(
        pl.col("_host").alias("host"),
        pl.col("_gpu").cast(pl.Int16).alias("gpu"),
        pl.col("_ts").alias("ts"),
        pl.col("_util").alias("util"),
        pl.col("_mu").alias("mem_used_mib"),
        pl.col("_mt").alias("mem_total_mib"),
        (pl.col(m.job_id).cast(pl.String) if m.job_id else pl.lit(None, pl.String)).alias("job_id"),
    )
    return good, refused


def parse_allocation(text: str) -> list[tuple[str, int]]:
    """`node01:0-3;node02:0,2` (also space-separated) -> [(host, gpu), ...]. Raises ValueError."""
    pairs: list[tuple[str, int]] = []
    for part in text.replace(" ", ";").split(";"):
        part = part.strip()
        if not part:
            continue
        host, sep, idx = part.partition(":")
        if not sep or not host:
            raise ValueError(f"allocation entry {part!r} is not host:indices")
        pairs.extend((host, i) for i in expand_indices(idx))
    return pairs


def _state(raw: str | None, m: JobsMapping) -> str | None:
    if raw is None:
        return None
    if raw in m.state_map:
        return m.state_map[raw]
    if raw.lower() in STATES:
        return raw.lower()
    s = map_state(raw)
    return s if s in STATES else None


def map_jobs(
    df: pl.DataFrame,
    m: JobsMapping,
    location: str,
    loc: pl.Expr,
    times: TimeBounds = TimeBounds(),
) -> tuple[pl.DataFrame, pl.DataFrame, list[Refused]]:
    """Input rows -> (jobs rows, job_gpus rows, refused); a submit, start or end time `times`
    does not believe is refused."""
    _missing(
        df,
        [
            m.job_id,
            m.user,
            m.vc,
            m.name,
            m.submit,
            m.start,
            m.end,
            m.state,
            m.gpus,
            m.hosts,
            m.allocation,
            m.is_debug,
        ],
        "jobs",
    )

    def t(col: str | None) -> pl.Expr:
        if col is None:
            return pl.lit(None, dtype=UTC_TS)
        return _time(col, df.schema[col], m.time_format, m.timezone)

    def bad_t(col: str | None, parsed: str) -> pl.Expr:
        if col is None:
            return pl.lit(False)
        raw = pl.col(col).cast(pl.String).str.strip_chars()
        present = raw.is_not_null() & (raw != "") & ~raw.is_in(["None", "Unknown", "NA", "null"])
        return present & pl.col(parsed).is_null()

    def s(col: str | None) -> pl.Expr:
        return pl.col(col).cast(pl.String).str.strip_chars() if col else pl.lit(None, pl.String)

    out = df.with_columns(
        loc.alias("_loc"),
        s(m.job_id).alias("_id"),
        t(m.submit).alias("_submit"),
        t(m.start).alias("_start"),
        t(m.end).alias("_end"),
        (_num(m.gpus) if m.gpus else pl.lit(None, pl.Float64)).alias("_gpus"),
        s(m.state).alias("_raw_state"),
    )
    states = [_state(v, m) for v in out["_raw_state"].to_list()]
    out = out.with_columns(pl.Series("_state", states, dtype=pl.String))
    allocs: list[list[tuple[str, int]] | None] = []
    alloc_err: list[str | None] = []
    alloc_src = out[m.allocation].cast(pl.String).to_list() if m.allocation else None
    host_src = out[m.hosts].cast(pl.String).to_list() if m.hosts else None
    for i in range(out.height):
        try:
            if alloc_src is not None and alloc_src[i]:
                allocs.append(parse_allocation(alloc_src[i]))
            elif host_src is not None and host_src[i]:
                allocs.append([(h, -1) for h in expand_hostlist(host_src[i])])
            else:
                allocs.append(None)
            alloc_err.append(None)
        except (ValueError, HostListError) as exc:
            allocs.append(None)
            alloc_err.append(f"bad allocation: {exc}")
    out = out.with_columns(pl.Series("_alloc_err", alloc_err, dtype=pl.String))
    when = pl.coalesce(times.problem_expr(pl.col(c)) for c in ("_submit", "_start", "_end"))
    problem = (
        pl.when(pl.col("_id").is_null() | (pl.col("_id") == ""))
        .then(pl.lit("missing job id"))
        .when(bad_t(m.submit, "_submit") | bad_t(m.start, "_start") | bad_t(m.end, "_end"))
        .then(pl.lit("unparseable time"))
        .when(when.is_not_null())
        .then(when)
        .when(pl.col("_end") < pl.col("_start"))
        .then(pl.lit("end before start"))
        .when(pl.col("_gpus") < 0)
        .then(pl.lit("negative GPU count"))
        .when(~pl.col("_gpus").is_finite().fill_null(True) | (pl.col("_gpus") > 2**31 - 1))
        .then(pl.lit("GPU count not a number"))  # NaN, inf: the Int32 cast failed (fuzzing)
        .when(pl.col("_raw_state").is_not_null() & pl.col("_state").is_null())
        .then(pl.lit("unknown state: ") + pl.col("_raw_state"))
        .when(pl.col("_alloc_err").is_not_null())
        .then(pl.col("_alloc_err"))
        .otherwise(pl.lit(None, dtype=pl.String()))
    )
    out = out.with_columns(problem.alias("_problem"), pl.Series("_row", range(out.height)))
    refused = _refused(out.select(*df.columns, "_loc", "_problem"), location)
    good = out.filter(pl.col("_problem").is_null()).unique(
        subset="_id", keep="last", maintain_order=True
    )
    debug = (
        pl.col(m.is_debug).cast(pl.String).str.to_lowercase().is_in(["1", "true", "yes", "y", "t"])
        if m.is_debug
        else pl.lit(False)
    )
    jobs = good.select(
        pl.col("_id").alias("job_id"),
        s(m.user).alias("user"),
        s(m.vc).alias("vc"),
        s(m.name).alias("name"),
        pl.col("_state")
        .fill_null(
            pl.when(pl.col("_end").is_null()).then(pl.lit("running")).otherwise(pl.lit("passed"))
        )
        .alias("state"),
        pl.col("_raw_state").alias("raw_state"),
        pl.col("_submit").alias("submit_ts"),
        pl.col("_start").alias("start_ts"),
        pl.col("_end").alias("end_ts"),
        pl.col("_gpus").cast(pl.Int32).alias("gpus"),
        debug.alias("is_debug"),
    )
    rows: list[tuple[str, str, int, object, object]] = []
    for rec in good.select("_id", "_start", "_end", "_row").iter_rows():
        pairs = allocs[rec[3]]
        if pairs is None or rec[1] is None:
            continue
        for host, gpu in dict.fromkeys(pairs):
            rows.append((rec[0], host, gpu, rec[1], rec[2]))
    job_gpus = pl.DataFrame(
        rows,
        schema={
            "job_id": pl.String,
            "host": pl.String,
            "gpu": pl.Int16,
            "start_ts": UTC_TS,
            "end_ts": UTC_TS,
        },
        orient="row",
    ).with_columns(pl.lit(0, dtype=pl.Int16).alias("attempt"))
    return jobs, job_gpus, refused


def split_csv(text: str, name: str) -> tuple[pl.DataFrame, pl.Expr, list[Refused]]:
    """CSV text -> string columns, each row's line number, and the records refused for a field
    count that differs from the header's (pure; quoted fields may span lines)."""
    return next(csv_batches(io.StringIO(text, newline=""), name))


def csv_batches(
    lines: Iterable[str], name: str, batch_rows: int | None = None
) -> Iterator[tuple[pl.DataFrame, pl.Expr, list[Refused]]]:
    """CSV lines -> batches of `batch_rows` rows (all in one when None) as `split_csv` gives
    them: the file source reads a file of any size this way, a batch at a time."""
    reader = csv.reader(lines)
    header = next(reader, None)
    if not header:
        raise IngestError(f"{name} is not a readable csv file (no header line).")
    dupes = sorted({h for h in header if header.count(h) > 1})
    if dupes:
        raise IngestError(f"{name} is not a readable csv file (column '{dupes[0]}' appears twice).")
    rows: list[list[str]] = []
    numbers: list[str] = []
    refused: list[Refused] = []
    start = reader.line_num + 1
    batches = 0
    try:
        for rec in reader:
            if not rec:
                start = reader.line_num + 1
                continue
            if len(rec) != len(header):
                refused.append(
                    Refused(
                        f"{name}:{start}",
                        f"wrong field count: {len(rec)} fields, the header has {len(header)}",
                        ",".join(rec),
                    )
                )
            else:
                rows.append(rec)
                numbers.append(str(start))
            start = reader.line_num + 1
            if batch_rows is not None and len(rows) >= batch_rows:
                yield _csv_batch(header, rows, numbers, refused)
                rows, numbers, refused = [], [], []
                batches += 1
    except csv.Error as exc:
        raise IngestError(
            f"{name} is not a readable csv file (line {reader.line_num}: {exc})."
        ) from None
    if rows or refused or not batches:
        yield _csv_batch(header, rows, numbers, refused)


def _csv_batch(
    header: list[str], rows: list[list[str]], numbers: list[str], refused: list[Refused]
) -> tuple[pl.DataFrame, pl.Expr, list[Refused]]:
    df = pl.DataFrame(rows, schema=dict.fromkeys(header, pl.String()), orient="row")
    df = df.with_columns(pl.all().replace("", None))  # an empty field is a missing value
    return df, pl.lit(pl.Series("line", numbers, dtype=pl.String())), refused
