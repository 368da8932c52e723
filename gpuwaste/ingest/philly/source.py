"""The Philly source: a folder with the public trace's files -> jobs, job_gpus, samples.

I/O and writes only; parsing is in `philly.parse`. The utilization files (3 GB of CSV in the real
trace) are read in byte chunks cut at line ends (`CHUNK_BYTES`; `files.byte_blocks`, within the
`[files]` bounds), each chunk parsed by polars'
CSV reader (`parse_chunk`: clean rows in bulk, odd rows line by line) and written at once to a
staging folder inside the data directory, one parquet file per chunk and UTC
day; memory therefore stays bounded by one chunk and, at the end, one day of samples. Then, day by
day, the staged rows replace the window [first sample, last sample] of `gpu_samples` and
`host_samples` for source `philly` (`Warehouse.replace_window`), so a re-run writes the same rows
again and never doubles them. Jobs are upserted by job_id; each job's `job_gpus` rows are
replaced whole.

Before anything is written every present file's header (and the whole job log) is checked: a file
that is not the declared Philly file is refused with one sentence naming it. The job log is
required; a missing utilization file is reported in the run's note. `cluster_machine_list` is
not read (it is known to be wrong).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl

from gpuwaste.config import ClusterConfig, FileLimits, Settings
from gpuwaste.ingest.base import IngestError, IngestResult, RunOptions
from gpuwaste.ingest.files import byte_blocks, check_read_whole
from gpuwaste.ingest.job_precedence import yield_label_jobs
from gpuwaste.ingest.philly.parse import (
    CPU_UTIL,
    GPU_UTIL,
    JOB_LOG,
    MEM_UTIL,
    SOURCE,
    PhillyFormatError,
    PhillyJobs,
    check_header,
    parse_chunk,
    parse_job_log,
    refuse_times,
)
from gpuwaste.ingest.staging import day_window, read_day, stage, staged_days, staging_folder
from gpuwaste.ingest.times import TimeBounds
from gpuwaste.warehouse.bookkeeping import Refused, set_watermark, write_quarantine
from gpuwaste.warehouse.schema import UTC_TS
from gpuwaste.warehouse.store import Warehouse

CHUNK_BYTES = 32 * 1024 * 1024
UTIL_FILE = "Philly utilization"  # in the reader's messages


def iter_byte_chunks(
    path: Path, chunk_bytes: int = CHUNK_BYTES, limits: FileLimits = FileLimits()
) -> Iterator[tuple[int, bytes]]:
    """(first line number, block of whole lines) of about `chunk_bytes`, after the header line
    (`files.byte_blocks`, within the `[files]` bounds).

    Line numbers are 1-based (the header is line 1), counted with `\n` as in the file.
    """
    for lineno, data, _last in byte_blocks(path, UTIL_FILE, limits, chunk_bytes):
        if lineno == 1:  # the header, checked already
            _header, _nl, data = data.partition(b"\n")
            lineno = 2
        if data:
            yield lineno, data


def first_line(path: Path) -> str:
    with open(path, "rb") as fh:
        return fh.readline(4096).decode("utf-8", errors="replace")


def stage_file(
    path: Path,
    kind: str,
    folder: Path,
    timezone: str,
    chunk_bytes: int = CHUNK_BYTES,
    times: TimeBounds = TimeBounds(),
    limits: FileLimits = FileLimits(),
) -> tuple[int, pl.DataFrame]:
    """Parse one utilization file chunk by chunk into staged parquet; (records, refused). A
    line at a time `times` does not believe is refused."""
    records = 0
    refused: list[pl.DataFrame] = []
    for part, (first, data) in enumerate(iter_byte_chunks(path, chunk_bytes, limits)):
        good, bad, n = parse_chunk(kind, data, first, str(path), timezone)
        good, late = refuse_times(good, times, str(path))
        records += n
        for frame in (bad, late):
            if frame.height:
                refused.append(frame)
        stage(good, folder, part)
    if refused:
        return records, pl.concat(refused)
    return records, pl.DataFrame(
        schema={"location": pl.String, "reason": pl.String, "raw": pl.String}
    )


def _bounds(folders: list[Path]) -> tuple[datetime, datetime] | None:
    lo: datetime | None = None
    hi: datetime | None = None
    for f in folders:
        if not f.is_dir():
            continue
        b = (
            pl.scan_parquet(f / "date=*" / "*.parquet")
            .select(pl.col("ts").min().alias("lo"), pl.col("ts").max().alias("hi"))
            .collect()
        )
        a, z = b["lo"][0], b["hi"][0]
        if isinstance(a, datetime):
            lo = a if lo is None else min(lo, a)
        if isinstance(z, datetime):
            hi = z if hi is None else max(hi, z)
    if lo is None or hi is None:
        return None
    return lo, hi + timedelta(microseconds=1)


def _group_codes(rows: pl.DataFrame, groups: list[str]) -> np.ndarray | None:
    """Per row, a uint16 numbering (host, *groups) in their sorted order (the host's rank among
    the sorted hosts, then each integer group column offset by its minimum); None when the
    groups do not fit in 16 bits or a value is missing."""
    if any(rows[c].null_count() for c in ("host", *groups)):
        return None
    hosts = rows["host"].unique().sort()
    code = pl.col("host").cast(pl.Enum(hosts.to_list())).to_physical().cast(pl.Int64)
    span = hosts.len()
    for c in groups:
        col = pl.col(c).cast(pl.Int64)
        lo, hi = rows.select(col.min(), col.max().alias("hi")).row(0)
        size = int(hi) - int(lo) + 1
        code = code * size + (col - int(lo))
        span *= size
    if span > 1 << 16:
        return None
    return rows.select(code.cast(pl.UInt16))[:, 0].to_numpy()


TIME_BITS = 40  # time offsets (microseconds) inside one sort: about 12 days; a day file needs 1


def order_last_wins(rows: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Rows sorted by (host, *keys) with one row per key: of rows repeating a key (a machine row
    repeated in the file), the last in the file wins: the one with the highest `lineno`, or,
    without that column, the last in `rows`. The last key is the time.

    The utilization files run forward in time, so the rows of one machine (and GPU) mostly come
    in time order already. A stable radix sort (numpy's argsort of uint16) on a small integer per
    (host, GPU) puts a whole day in that order in one linear pass; with the time offset below it,
    that is one Int64 key per row. The few rows that come later than a row with a larger key
    (the odd rows the exact parser read come after their block's bulk) are taken out, sorted and
    merged back. The shared writer then finds the rows in order and does not sort again.
    """
    order = "lineno" if "lineno" in rows.columns else "_row"
    if rows.height == 0:
        return rows.drop("lineno", strict=False)
    df = rows if order == "lineno" else rows.with_row_index("_row")
    *groups, last = keys
    ranks = ["host", *keys]
    codes = _group_codes(df, groups) if df[last].null_count() == 0 else None
    times = df[last].to_physical().cast(pl.Int64).to_numpy() if codes is not None else None
    if codes is None or times is None or int(times.max() - times.min()) >= 1 << TIME_BITS:
        df = df.sort([*ranks, order], nulls_last=True)
        same_next = pl.all_horizontal([pl.col(r).eq_missing(pl.col(r).shift(-1)) for r in ranks])
        return df.filter(~same_next.fill_null(False)).drop(order)
    # The permutation is built in numpy and applied to the rows once.
    perm = np.argsort(codes, kind="stable")
    key = codes[perm].astype(np.int64) * (1 << TIME_BITS) + (times[perm] - times.min())
    lineno = df[order].to_numpy()[perm]
    late = np.zeros(len(key), dtype=bool)
    late[1:] = key[1:] < np.maximum.accumulate(key)[:-1]
    if late.any():
        late_at = np.flatnonzero(late)
        late_at = late_at[np.lexsort((lineno[late_at], key[late_at]))]
        on_time = ~late
        at = np.searchsorted(key[on_time], key[late_at], side="right")
        perm = np.insert(perm[on_time], at, perm[late_at])
        key = np.insert(key[on_time], at, key[late_at])
        lineno = np.insert(lineno[on_time], at, lineno[late_at])
    starts = np.ones(len(key), dtype=bool)
    starts[1:] = key[1:] != key[:-1]
    if not starts.all():  # a key repeated: the row latest in the file wins
        run_last = np.maximum.reduceat(lineno, np.flatnonzero(starts))
        perm = perm[lineno == run_last[np.cumsum(starts) - 1]]
    return df[perm].drop(order)


def _empty(columns: dict[str, pl.DataType]) -> pl.DataFrame:
    return pl.DataFrame(schema={"host": pl.String, "ts": UTC_TS, **columns, "lineno": pl.Int64})


def _gpu_days(gpu_dir: Path) -> Iterator[tuple[str, pl.DataFrame]]:
    for day in staged_days(gpu_dir):
        rows = read_day(gpu_dir, day)
        assert rows is not None
        # A machine row repeated in the file gives one sample per (host, gpu, ts).
        yield (
            day,
            order_last_wins(rows, ["gpu", "ts"]).with_columns(
                pl.lit(SOURCE).alias("source"), pl.lit("philly_gpu_util").alias("util_source")
            ),
        )


def _host_days(cpu_dir: Path, mem_dir: Path) -> Iterator[tuple[str, pl.DataFrame]]:
    for day in sorted(set(staged_days(cpu_dir)) | set(staged_days(mem_dir))):
        cpu = read_day(cpu_dir, day)
        mem = read_day(mem_dir, day)
        cpu = order_last_wins(
            cpu if cpu is not None else _empty({"cpu_util": pl.Float64()}), ["ts"]
        )
        mem = order_last_wins(
            mem if mem is not None else _empty({"mem_used_frac": pl.Float64()}), ["ts"]
        )
        rows = order_last_wins(  # one row per (host, ts) each side: this only sorts
            cpu.join(mem, on=["host", "ts"], how="full", coalesce=True), ["ts"]
        )
        yield day, rows.with_columns(pl.lit(SOURCE).alias("source"))


def write_samples(wh: Warehouse, cluster: str, stage: Path) -> dict[str, int]:
    """Replace gpu_samples and host_samples of source philly, one UTC day at a time.

    (Writing day N in a second thread while day N+1 is put in order gained nothing measurable:
    the polars and numpy steps already keep both cores busy.)
    """
    written = {"gpu_samples": 0, "host_samples": 0}
    gpu_dir, cpu_dir, mem_dir = stage / GPU_UTIL, stage / CPU_UTIL, stage / MEM_UTIL
    plans = [
        ("gpu_samples", _bounds([gpu_dir]), _gpu_days(gpu_dir)),
        ("host_samples", _bounds([cpu_dir, mem_dir]), _host_days(cpu_dir, mem_dir)),
    ]
    for name, bounds, days in plans:
        if bounds is None:
            continue
        for day, rows in days:
            lo, hi = day_window(day, *bounds)
            written[name] += wh.replace_window(name, cluster, lo, hi, rows, source=SOURCE)
    return written


def load_job_log(
    path: Path, timezone: str, limits: FileLimits, times: TimeBounds = TimeBounds()
) -> PhillyJobs:
    """The job log, read whole (within `[files] max_read_whole_mib`)."""
    check_read_whole(path, "Philly job log", limits)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise IngestError(f"{path} is not a text file; expected the Philly JSON job log.") from None
    except OSError as exc:
        raise IngestError(f"could not read {path}: {exc.strerror or exc}.") from None
    try:
        return parse_job_log(text, timezone, str(path), times)
    except PhillyFormatError as exc:
        raise IngestError(f"{path} is not the Philly job log: {exc}.") from None


def _to_refused(df: pl.DataFrame) -> list[Refused]:
    return [Refused(loc, reason, raw or "") for loc, reason, raw in df.iter_rows()]


def ingest_philly(
    settings: Settings,
    cluster: ClusterConfig,
    *,
    chunk_bytes: int = CHUNK_BYTES,
) -> IngestResult:
    cfg = cluster.philly
    if cfg is None:
        raise IngestError(f"cluster '{cluster.name}' has no [philly] source configured.")
    folder = cfg.dir
    if not folder.is_dir():
        raise IngestError(f"Philly trace folder {folder} does not exist or is not a folder.")
    job_log = folder / JOB_LOG
    if not job_log.is_file():
        raise IngestError(
            f"{folder} has no {JOB_LOG}: expected the unpacked Philly trace "
            f"({JOB_LOG}, {GPU_UTIL}, {CPU_UTIL}, {MEM_UTIL})."
        )
    present = [k for k in (GPU_UTIL, CPU_UTIL, MEM_UTIL) if (folder / k).is_file()]
    missing = [k for k in (GPU_UTIL, CPU_UTIL, MEM_UTIL) if k not in present]
    # Refuse a wrong file before writing anything.
    for kind in present:
        try:
            check_header(kind, first_line(folder / kind))
        except PhillyFormatError as exc:
            raise IngestError(f"{folder / kind}: {exc}.") from None
    times = TimeBounds.at(datetime.now(UTC), settings.ingest)
    jobs = load_job_log(job_log, cfg.timezone, settings.files, times)

    wh = Warehouse(settings.data_dir)
    refused: list[Refused] = list(jobs.refused)
    records = jobs.accepted + len(jobs.refused)
    by_file: dict[str, list[Refused]] = {str(job_log): list(jobs.refused)}
    with staging_folder(settings.data_dir, SOURCE) as staged:
        for kind in present:
            n, bad = stage_file(
                folder / kind,
                kind,
                staged / kind,
                cfg.timezone,
                chunk_bytes,
                times,
                settings.files,
            )
            records += n
            r = _to_refused(bad)
            by_file[str(folder / kind)] = r
            refused.extend(r)
        written = write_samples(wh, cluster.name, staged)
    if jobs.jobs.height:
        written["jobs"] = wh.upsert("jobs", cluster.name, SOURCE, jobs.jobs)
        written["job_gpus"] = wh.replace_rows_where(
            "job_gpus",
            cluster.name,
            SOURCE,
            pl.col("job_id").is_in(jobs.jobs["job_id"].implode()),
            jobs.job_gpus,
        )
        yield_label_jobs(wh, cluster.name)
    for batch, rows in by_file.items():
        write_quarantine(wh, cluster.name, SOURCE, batch, rows)
    marks = [jobs.jobs["end_ts"].max(), jobs.jobs["start_ts"].max()]
    mark = max((m for m in marks if isinstance(m, datetime)), default=None)
    if mark is not None:
        set_watermark(wh, cluster.name, SOURCE, mark, {"dir": str(folder)})
    note = f"{jobs.jobs.height} jobs, {jobs.job_gpus.height} job x GPU rows"
    note += f", {written.get('gpu_samples', 0)} GPU samples, {written.get('host_samples', 0)} host samples"
    if jobs.attempts_without_interval:
        note += f", {jobs.attempts_without_interval} attempts without start or end"
    if missing:
        note += f"; not in the folder: {', '.join(missing)}"
    return IngestResult(
        source=SOURCE,
        cluster=cluster.name,
        accepted=records - len(refused),
        refused=refused,
        written=written,
        note=note,
    )


def run_philly(settings: Settings, cluster: ClusterConfig, options: RunOptions) -> IngestResult:
    """The configured trace folder of `cluster` (its runner in `ingest.sources`)."""
    return ingest_philly(settings, cluster)
