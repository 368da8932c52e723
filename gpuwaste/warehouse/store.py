"""Partitioned parquet writes that replace a (table, cluster, window) file by file, atomically.

Every write goes to a temporary file in the destination folder, is flushed to disk, and is then
renamed over the old file (`os.replace`), so a reader sees each file old or new and never half
of it. A window of samples spans day files, and a day of a wide cluster blocks of hosts
(`host_blocks`): a reader during the write may see some days or hosts new and others old, never
a row twice or none. Writing the same window twice leaves one copy: the window's old rows are
dropped before the new ones are added.
"""

from __future__ import annotations

import io
import os
import re
import uuid
from collections.abc import Collection, Iterable
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import IO, Any, BinaryIO, cast

import duckdb
import polars as pl

from gpuwaste.errors import WarehouseError
from gpuwaste.warehouse.disk import writing
from gpuwaste.warehouse.host_blocks import (
    BLOCK_HOSTS,
    block_index,
    blocks_holding,
    boundary_of,
    cut_of,
    file_name,
    new_boundaries,
)
from gpuwaste.warehouse.schema import Table, conform, table

TMP_MARK = ".tmp-"


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class _KeepsWriteError(io.RawIOBase):
    """The file `fh` as polars writes to it, keeping the OSError of a write that failed: polars
    reports a failed write inside a page header or the footer as 'File out of specification:
    Invalid thrift: transport error', the disk's errno lost (issue #47: a full disk)."""

    def __init__(self, fh: BinaryIO) -> None:
        self.fh = fh
        self.failure: OSError | None = None

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        try:
            return self.fh.write(data)
        except OSError as exc:
            self.failure = exc
            raise


def write_parquet_file(df: pl.DataFrame, path: Path, *, fsync: bool = True, **options: Any) -> None:
    """`df.write_parquet(path, **options)` (the same bytes), a failed write raised as the
    OSError the system gave (its errno: `disk.write_error` names a full disk); flushed to the
    disk when `fsync`."""
    with open(path, "wb") as fh:
        sink = _KeepsWriteError(fh)
        try:
            df.write_parquet(cast(IO[bytes], sink), **options)  # a file object, as polars reads it
        except pl.exceptions.PolarsError as exc:
            if sink.failure is not None:
                raise sink.failure from exc
            raise
        fh.flush()
        if fsync:
            os.fsync(fh.fileno())


def atomic_write_parquet(df: pl.DataFrame, dest: Path) -> None:
    """Write `df` to `dest` through a temporary file and a rename; on failure `dest` is intact
    (a full disk: one sentence naming it, `disk.write_error`)."""
    tmp = dest.with_name(f"{dest.name}{TMP_MARK}{uuid.uuid4().hex}")
    with writing(dest):
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            write_parquet_file(df, tmp, compression="zstd", statistics=True)
            os.replace(tmp, dest)
            _fsync_dir(dest.parent)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise


def sql_string(text: str | Path) -> str:
    """`text` (a path) as a SQL string literal."""
    return "'" + str(text).replace("'", "''") + "'"


def atomic_copy_parquet(
    con: duckdb.DuckDBPyConnection, query: str, dest: Path, params: list[object] | None = None
) -> None:
    """The rows of `query` (a SELECT, run by DuckDB: streamed, spilling past its memory limit,
    never held in Python) written to `dest` through a temporary file and a rename, as
    `atomic_write_parquet`; on failure `dest` is intact."""
    tmp = dest.with_name(f"{dest.name}{TMP_MARK}{uuid.uuid4().hex}")
    try:
        with writing(dest):  # DuckDB says a full disk only in its message: `writing` reads it
            dest.parent.mkdir(parents=True, exist_ok=True)
            con.execute(
                f"copy ({query}) to {sql_string(tmp)} (format parquet, compression zstd)", params
            )
            with open(tmp, "rb+") as fh:
                os.fsync(fh.fileno())
            os.replace(tmp, dest)
            _fsync_dir(dest.parent)
    finally:
        tmp.unlink(missing_ok=True)


def _read_file(path: Path, t: Table) -> pl.DataFrame:
    try:
        df = pl.read_parquet(path)
    except FileNotFoundError:
        return conform(pl.DataFrame(), t, stored=True).clear()
    except Exception as exc:  # corrupt file: say which
        raise WarehouseError(f"could not read {path}: {exc}.") from exc
    return conform(df, t, stored=True)


def sorted_by(df: pl.DataFrame, cols: list[str]) -> bool:
    """True if `df` is already in the order `df.sort(cols)` gives (so the sort can be skipped:
    checking is a vectorised pass, sorting millions of rows by strings is not)."""
    if df.height < 2:
        return True
    if any(df[c].null_count() for c in cols):
        return False
    in_order = pl.lit(True)
    for c in reversed(cols):
        prev = pl.col(c).shift(1)
        in_order = (pl.col(c) > prev) | ((pl.col(c) == prev) & in_order)
    return bool(df.select(in_order.fill_null(True).all()).item())


def _sort(df: pl.DataFrame, t: Table) -> pl.DataFrame:
    if not t.sort or sorted_by(df, list(t.sort)):
        return df
    return df.sort(list(t.sort))


def _days(start: datetime, end: datetime) -> list[date]:
    """UTC calendar days touched by the half-open window [start, end)."""
    d = start.astimezone(UTC).date()
    last = (end.astimezone(UTC) - timedelta(microseconds=1)).date()
    out = []
    while d <= last:
        out.append(d)
        d += timedelta(days=1)
    return out


def _scan_day(day_dir: Path) -> tuple[list[tuple[str, Path]], list[str] | None]:
    """One day's folder: its block files with the first host of each, in host order, and the
    day's cut (the first hosts of its blocks, '' first, those moved aside included:
    `host_blocks.cut_of`), None when it has no block, stored or moved aside (not stored yet)."""
    blocks: list[tuple[str, Path]] = []
    cut: set[str] = set()
    for path in day_dir.glob("*"):
        if TMP_MARK in path.name:
            continue
        if (boundary := boundary_of(path.name)) is not None:  # a block's file
            blocks.append((boundary, path))
            cut.add(boundary)
        elif (held := cut_of(path.name)) is not None:  # a block's file moved aside
            cut.add(held)
    return sorted(blocks), sorted({"", *cut}) if cut else None


_DAY_DIR = re.compile(r"date=\d{4}-\d{2}-\d{2}")


class Warehouse:
    """The parquet side of a data directory: `<data_dir>/parquet/<table>/cluster=<c>/...`."""

    def __init__(self, data_dir: Path, block_hosts: int = BLOCK_HOSTS) -> None:
        self.data_dir = Path(data_dir)
        self.root = self.data_dir / "parquet"
        self.block_hosts = block_hosts  # hosts per block of a day first written (host_blocks)

    # ----------------------------------------------------------------- paths
    def table_dir(self, name: str) -> Path:
        return self.root / name

    def cluster_dir(self, name: str, cluster: str) -> Path:
        return self.table_dir(name) / f"cluster={cluster}"

    def cluster_file(self, name: str, cluster: str, key: str) -> Path:
        """`<table>/cluster=<c>/<key>.parquet`: one per-cluster file (it may not exist yet)."""
        return self.cluster_dir(name, cluster) / f"{key}.parquet"

    def files(self, name: str) -> list[Path]:
        t = table(name)
        base = self.table_dir(name)
        pattern = "*/*/*.parquet" if t.layout == "dated" else "*/*.parquet"
        return sorted(p for p in base.glob(pattern) if TMP_MARK not in p.name)

    def _day_dirs(
        self, name: str, cluster: str, first: date | None = None, last: date | None = None
    ) -> list[Path]:
        """The day folders of the dated table `name` for `cluster` (from `first` to `last`,
        both included, when given), in day order; a folder renamed aside (`date=...old`) is
        none."""
        lo = f"date={first.isoformat()}" if first else ""
        hi = f"date={last.isoformat()}" if last else "~"
        days = self.cluster_dir(name, cluster).glob("date=*")
        return sorted(d for d in days if _DAY_DIR.fullmatch(d.name) and lo <= d.name <= hi)

    def day_files(
        self,
        name: str,
        cluster: str,
        first: date | None = None,
        last: date | None = None,
        hosts: Collection[str] | None = None,
    ) -> list[Path]:
        """The stored files of the dated table `name` for `cluster`, from day `first` to day
        `last` (both included; every day when not given), in day and host order; with
        `hosts`, only the blocks of each day that hold one of them (`host_blocks`: a host of a
        block moved aside is in no file, not in the block before)."""
        if table(name).layout != "dated":
            raise ValueError(f"{name} is not a dated table")
        out: list[Path] = []
        for day in self._day_dirs(name, cluster, first, last):
            blocks, cut = _scan_day(day)
            if hosts is not None and cut is not None:
                wanted = {cut[i] for i in blocks_holding(cut, hosts)}
                blocks = [(b, p) for b, p in blocks if b in wanted]
            out.extend(p for _, p in blocks)
        return out

    def stored_days(self, name: str, cluster: str, first: date, last: date) -> list[date]:
        """The days from `first` to `last` (both included) that the dated table `name` holds
        a folder of for `cluster`, in order."""
        return [
            date.fromisoformat(d.name.removeprefix("date="))
            for d in self._day_dirs(name, cluster, first, last)
        ]

    def has_files(self, name: str) -> bool:
        return bool(self.files(name))

    def clusters(self, name: str) -> list[str]:
        base = self.table_dir(name)
        if not base.is_dir():
            return []
        return sorted(p.name.split("=", 1)[1] for p in base.glob("cluster=*") if p.is_dir())

    def remove_temp_files(self, names: Iterable[str]) -> int:
        """Delete temporary files a killed writer left under these tables; call only while
        holding the lock of the writer that owns them. Returns how many were removed."""
        removed = 0
        for name in names:
            base = self.table_dir(name)
            if not base.is_dir():
                continue
            for p in base.rglob(f"*{TMP_MARK}*"):
                p.unlink(missing_ok=True)
                removed += 1
        return removed

    # ---------------------------------------------------------------- writes
    def replace_window(
        self,
        name: str,
        cluster: str,
        start: datetime,
        end: datetime,
        rows: pl.DataFrame,
        *,
        source: str | None = None,
    ) -> int:
        """Replace the rows of a dated table in [start, end) for one cluster (and source).

        Rows already stored in the window (of the same `source`, when given) are dropped and
        `rows` put in their place, one UTC day at a time, each of its blocks of hosts
        (`host_blocks`) replaced whole through a rename. Returns rows written.
        """
        t = table(name)
        if t.layout != "dated":
            raise ValueError(f"{name} is not a dated table")
        if end <= start:
            return 0
        rows = conform(rows, t, stored=True)
        outside = rows.filter((pl.col("ts") < start) | (pl.col("ts") >= end))
        if outside.height:
            raise ValueError(f"{outside.height} row(s) of {name} lie outside [{start}, {end})")
        written = 0
        # Only days with new rows or a stored file can change: a window of decades (one sample
        # from a wrong clock) must not read 20,000 absent files.
        stored = {d.name for d in self._day_dirs(name, cluster)}
        with_rows = set(rows["ts"].dt.date().unique().to_list())
        for day in _days(start, end):
            if day not in with_rows and f"date={day.isoformat()}" not in stored:
                continue
            day_start = datetime(day.year, day.month, day.day, tzinfo=UTC)
            lo, hi = max(start, day_start), min(end, day_start + timedelta(days=1))
            new = rows.filter((pl.col("ts") >= lo) & (pl.col("ts") < hi))
            drop = (pl.col("ts") >= lo) & (pl.col("ts") < hi)
            if source is not None:
                drop = drop & (pl.col("source") == source)
            day_dir = self.cluster_dir(name, cluster) / f"date={day.isoformat()}"
            # the last block first and `data.parquet` last: a first write of the day cut short
            # leaves the later blocks it wrote, whose names keep those blocks for the next write
            for path, block in reversed(self._blocks(day_dir, new)):
                old = _read_file(path, t)
                kept = old.filter(~drop.fill_null(False))
                merged = pl.concat([kept, block], how="vertical_relaxed")
                if merged.height == 0 and not path.exists():
                    continue
                atomic_write_parquet(_sort(merged, t), path)
                written += block.height
        return written

    def _blocks(self, day_dir: Path, rows: pl.DataFrame) -> list[tuple[Path, pl.DataFrame]]:
        """Each block file of the day in `day_dir` with the `rows` that belong in it
        (`host_blocks`): the day's blocks (stored or moved aside), or, for a day with no file
        yet, blocks of `block_hosts` hosts of `rows`."""
        hosts = rows["host"].drop_nulls().unique().to_list()
        bounds = _scan_day(day_dir)[1] or new_boundaries(hosts, self.block_hosts)
        if len(bounds) == 1:
            return [(day_dir / file_name(bounds[0]), rows)]
        index = pl.col("host").replace_strict(
            hosts, [block_index(bounds, h) for h in hosts], default=0, return_dtype=pl.Int64
        )
        keyed = rows.with_columns(index.alias("_block"))
        return [
            (day_dir / file_name(b), keyed.filter(pl.col("_block") == i).drop("_block"))
            for i, b in enumerate(bounds)
        ]

    def replace_file(self, name: str, cluster: str, key: str, rows: pl.DataFrame) -> int:
        """Replace the whole file `<table>/cluster=<c>/<key>.parquet` with `rows`."""
        t = table(name)
        if t.layout != "cluster":
            raise ValueError(f"{name} is not a per-cluster table")
        rows = _sort(conform(rows, t, stored=True), t)
        atomic_write_parquet(rows, self.cluster_file(name, cluster, key))
        return rows.height

    def remove_file(self, name: str, cluster: str, key: str) -> None:
        """Delete `<table>/cluster=<c>/<key>.parquet` (one unlink: readers see it or not)."""
        if table(name).layout != "cluster":
            raise ValueError(f"{name} is not a per-cluster table")
        path = self.cluster_file(name, cluster, key)
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            raise WarehouseError(f"could not remove {path}: {exc.strerror or exc}.") from exc
        _fsync_dir(path.parent)

    def upsert(self, name: str, cluster: str, key: str, rows: pl.DataFrame) -> int:
        """Insert or update rows of `<table>/cluster=<c>/<key>.parquet` by the table's key."""
        t = table(name)
        if not t.key:
            raise ValueError(f"{name} has no key to upsert on")
        rows = conform(rows, t, stored=True).unique(subset=list(t.key), keep="last")
        path = self.cluster_file(name, cluster, key)
        old = _read_file(path, t)
        kept = old.join(rows.select(t.key), on=list(t.key), how="anti", nulls_equal=True)
        return self.replace_file(name, cluster, key, pl.concat([kept, rows])) - kept.height

    def replace_rows_where(
        self, name: str, cluster: str, key: str, match: pl.Expr, rows: pl.DataFrame
    ) -> int:
        """Drop the rows of one per-cluster file that satisfy `match`, then add `rows`."""
        t = table(name)
        path = self.cluster_file(name, cluster, key)
        old = _read_file(path, t)
        kept = old.filter(~match.fill_null(False))
        new = conform(rows, t, stored=True)
        self.replace_file(name, cluster, key, pl.concat([kept, new]))
        return new.height

    # ----------------------------------------------------------------- reads
    def read(self, name: str, cluster: str | None = None, key: str | None = None) -> pl.DataFrame:
        """Read a table (optionally one cluster, one file key) with its partition columns."""
        t = table(name)
        clusters = [cluster] if cluster is not None else self.clusters(name)
        frames: list[pl.DataFrame] = []
        for c in clusters:
            base = self.cluster_dir(name, c)
            if t.layout == "dated":
                paths: Iterable[Path] = self.day_files(name, c)
            elif key is not None:
                paths = [base / f"{key}.parquet"]
            else:
                paths = sorted(p for p in base.glob("*.parquet") if TMP_MARK not in p.name)
            for p in paths:
                if not p.exists():
                    continue
                df = _read_file(p, t).with_columns(pl.lit(c).alias("cluster"))
                frames.append(conform(df, t))
        if not frames:
            return conform(pl.DataFrame(), t).clear()
        return pl.concat(frames, how="vertical_relaxed")
