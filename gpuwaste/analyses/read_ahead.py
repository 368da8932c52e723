"""A host range's allocations and samples, and the thread that reads the next range's while the
steps run over the current one (`read_ahead`).

Sample files are sorted by host, so a range of hosts reads only its own row groups, over the
days its allocations cover (`date_span`, the one rule for which days a pass reads).
"""

from __future__ import annotations

from collections.abc import Generator
from concurrent.futures import ThreadPoolExecutor, wait
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import duckdb
import polars as pl

from gpuwaste.analyses import job_samples
from gpuwaste.analyses.host_ranges import HostRanges
from gpuwaste.analyses.sqlfiles import set_variables
from gpuwaste.warehouse.catalog import cursor, view_sql
from gpuwaste.warehouse.footers import Footers
from gpuwaste.warehouse.schema import GPU_SAMPLES
from gpuwaste.warehouse.store import Warehouse

# A host range (first, last host, inclusive), its allocations and their samples.
RangeRead = tuple[tuple[str, str], pl.DataFrame, pl.DataFrame]


def date_span(alloc: pl.DataFrame) -> tuple[date, date] | None:
    """The UTC days the allocations of `alloc` (start_ts, end_ts) cover, first and last, the one
    rule for which days of samples a pass reads: an allocation's end is exclusive, so one that
    ends at midnight does not reach the next day. None when `alloc` has no rows."""
    start, end = alloc["start_ts"].min(), alloc["end_ts"].max()
    if not isinstance(start, datetime) or not isinstance(end, datetime):
        return None
    last = end - timedelta(microseconds=1)
    return _utc(start).date(), _utc(last).date()


def _utc(ts: datetime) -> datetime:
    return ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts.astimezone(UTC)


def range_allocations(alloc_all: pl.DataFrame, host_range: tuple[str, str]) -> pl.DataFrame:
    """The allocations of `alloc_all` on the hosts of `host_range` (inclusive, by name)."""
    lo, hi = host_range
    return alloc_all.filter(pl.col("host").is_between(pl.lit(lo), pl.lit(hi)))


def range_samples(
    con: duckdb.DuckDBPyConnection,
    cluster: str,
    alloc_all: pl.DataFrame,
    host_range: tuple[str, str],
    data_dir: Path | None = None,
    footers: Footers | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The allocations of `alloc_all` on the hosts of `host_range`, and their samples
    (`job_samples.read`, over the days `date_span` gives them). With `data_dir` (the warehouse
    of `con`), they are read from the files of those days that hold the range's hosts only
    (`Warehouse.day_files`), not through the batch's views, which name the files of every host
    the batch reaches: a range binds the footers of its own blocks. And of the readings
    `job_samples.PASSED_ON`, only those these files can hold a value of, by their footers
    (`footers`: the batch's, each file's read once; the steps take a reading not read as
    null); without `data_dir`, every one."""
    alloc = range_allocations(alloc_all, host_range)
    span = date_span(alloc)
    if span is None:
        return alloc, pl.DataFrame()  # no allocation: the range's steps read nothing either
    source = "gpu_samples"
    readings: tuple[str, ...] = job_samples.PASSED_ON
    if data_dir is not None:
        wh = Warehouse(data_dir)
        files = wh.day_files(GPU_SAMPLES.name, cluster, *span, alloc["host"].unique().to_list())
        source = f"({view_sql(wh, GPU_SAMPLES, only=files)})"
        readings = (footers or Footers(job_samples.PASSED_ON)).may_hold_values(files)
    set_variables(
        con,
        {
            "cluster": cluster,
            "host_lo": host_range[0],
            "host_hi": host_range[1],
            "date_lo": span[0],
            "date_hi": span[1],
        },
    )
    return alloc, job_samples.read(con, alloc, source, readings)


def read_ahead(
    con: duckdb.DuckDBPyConnection,
    cluster: str,
    alloc_all: pl.DataFrame,
    ranges: HostRanges,
    data_dir: Path | None = None,
) -> Generator[RangeRead]:
    """Each host range of `ranges` with its allocations and their samples (`range_samples`),
    read one range ahead (a range is cut when the one before it has been read, from the samples
    read so far: `HostRanges`): while the caller works on a range, a thread reads the next one's
    samples on a cursor of `con`, so DuckDB decoding parquet uses the cores the caller's steps
    leave idle, for one range's samples more in memory (figures in bench/RESULTS.md).
    `data_dir`: as `range_samples` takes it. Use it closed (`contextlib.closing`): when the
    caller stops early, the read in flight is interrupted and waited for, and the cursor
    closed."""
    reader = cursor(con)
    footers = Footers(job_samples.PASSED_ON)
    try:
        with ThreadPoolExecutor(1, thread_name_prefix="gpuwaste-read") as pool:
            host_range = ranges.next()
            ahead = (
                [
                    pool.submit(
                        range_samples, reader, cluster, alloc_all, host_range, data_dir, footers
                    )
                ]
                if host_range is not None
                else []
            )
            try:
                while host_range is not None:
                    alloc, samples = ahead.pop().result()
                    ranges.read(host_range, samples.height)
                    following = ranges.next()
                    if following is not None:
                        ahead.append(
                            pool.submit(
                                range_samples,
                                reader,
                                cluster,
                                alloc_all,
                                following,
                                data_dir,
                                footers,
                            )
                        )
                    yield host_range, alloc, samples
                    host_range = following
            except GeneratorExit:
                # the caller stopped early (a step failed): the next range's read is not wanted.
                # DuckDB drops an interrupt sent before the query starts (the read lists its
                # files first), so it is sent again until the read has ended.
                if ahead and not ahead[0].cancel():
                    while not ahead[0].done():
                        reader.interrupt()
                        wait(ahead, timeout=0.05)
                raise
    finally:
        reader.close()


__all__ = ["RangeRead", "date_span", "range_allocations", "range_samples", "read_ahead"]
