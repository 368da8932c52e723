"""Rows of a file source staged on disk by UTC day, to be written a day at a time.

A file source that reads its input in blocks (Philly's utilization CSVs, an OpenMetrics text)
writes each block's rows here, one parquet part per block and day, in a folder under
`<data_dir>/.staging/` that it removes when done, on an error too (`staging_folder`). Reading a
day back gives its rows in the order they were staged (the file's order). Then the day's rows
replace the day's part of the source's window (`Warehouse.replace_window`), so memory holds
one block while reading and one day while writing.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import polars as pl

from gpuwaste.warehouse.disk import writing
from gpuwaste.warehouse.schema import conform, table
from gpuwaste.warehouse.store import Warehouse, write_parquet_file


@contextmanager
def staging_folder(data_dir: Path, source: str) -> Iterator[Path]:
    """A new folder `<data_dir>/.staging/<source>-<random>`, removed on leaving."""
    folder = data_dir / ".staging" / f"{source}-{uuid.uuid4().hex}"
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def remove_leftovers(data_dir: Path) -> None:
    """Delete the staging folders a killed ingest left (SIGKILL, the OOM killer); call only
    while holding the writer lock, as no other ingest can be staging then."""
    shutil.rmtree(data_dir / ".staging", ignore_errors=True)


def stage(df: pl.DataFrame, folder: Path, part: int) -> None:
    """`df` (a `ts` column) as part `part` of each UTC day it touches."""
    if df.height == 0:
        return
    first, last = df.select(pl.col("ts").min(), pl.col("ts").max().alias("hi")).row(0)
    if first.date() == last.date():  # a block of a few minutes: mostly inside one day
        pieces = {first.date(): df}
    else:
        days = df.with_columns(pl.col("ts").dt.date().alias("_day"))
        pieces = {
            day: piece.drop("_day")
            for (day,), piece in days.partition_by(
                "_day", as_dict=True, maintain_order=True
            ).items()
        }
    for day, piece in pieces.items():
        dest = folder / f"date={day}" / f"part-{part:06d}.parquet"
        with writing(dest, "nothing was stored"):
            dest.parent.mkdir(parents=True, exist_ok=True)
            write_parquet_file(piece, dest, fsync=False, compression="lz4", statistics=False)


def staged_days(folder: Path) -> list[str]:
    """The days staged in `folder` (ISO dates), in order."""
    return sorted(p.name.split("=", 1)[1] for p in folder.glob("date=*")) if folder.is_dir() else []


def read_day(folder: Path, day: str) -> pl.DataFrame | None:
    """A day's staged rows in the order they were staged; None when none was."""
    d = folder / f"date={day}"
    if not d.is_dir():
        return None
    return pl.read_parquet(sorted(d.glob("*.parquet")))


def replace_by_day(
    wh: Warehouse,
    name: str,
    cluster: str,
    folder: Path,
    bounds: tuple[datetime, datetime],
    source: str,
    prepare: Callable[[pl.DataFrame], pl.DataFrame] | None = None,
) -> int:
    """Replace the rows of `source` in [start, end) of the dated table `name` with the rows
    staged in `folder`, a day at a time (`prepare`d first): what one `replace_window` over the
    whole window does, also on the stored days that get no new row. Returns rows written."""
    start, end = bounds
    last = (end - timedelta(microseconds=1)).date()
    days = {date.fromisoformat(d) for d in staged_days(folder)}
    days |= set(wh.stored_days(name, cluster, start.date(), last))
    empty = conform(pl.DataFrame(), table(name), stored=True).clear()
    written = 0
    for day in sorted(days):
        lo, hi = day_window(day, start, end)
        rows = read_day(folder, day.isoformat())
        if rows is not None and prepare is not None:
            rows = prepare(rows)
        written += wh.replace_window(
            name, cluster, lo, hi, empty if rows is None else rows, source=source
        )
    return written


def day_window(day: str | date, lo: datetime, hi: datetime) -> tuple[datetime, datetime]:
    """The part of [lo, hi) on UTC day `day`."""
    d = date.fromisoformat(day) if isinstance(day, str) else day
    start = datetime(d.year, d.month, d.day, tzinfo=UTC)
    if d == date.max:  # 9999-12-31 has no next day; its samples are refused (ingest.times)
        return max(start, lo), hi
    return max(start, lo), min(start + timedelta(days=1), hi)
