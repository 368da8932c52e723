"""Reads while a partition is replaced again and again: no reader ever gets an error or a torn
partition.

Found here: DuckDB opens a parquet file more than once in a query (footer at bind, row groups at
scan), so an atomic rename between the two made `gpuwaste sql` and the dashboard fail with
"TProtocolException: Invalid data" or "Prefetch registered for bytes outside file" (about 1 in
150 queries under a writer that never stops). Fixed by `damaged.read_retrying` in the read
paths (`gpuwaste sql`, dashboard queries and SQL page); since issue 47 every reader runs its SQL
through `warehouse/reading.py`, which retries every read (tests/test_read_path.py).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import polars as pl
import pytest

from gpuwaste.act.job_report import UnknownJob, gather
from gpuwaste.act.notify.digest import Window, window_figures
from gpuwaste.act.policy.replay import replay
from gpuwaste.act.policy.rule import Rule
from gpuwaste.analyses.freshness import freshness
from gpuwaste.analyses.report import report
from gpuwaste.config import Settings
from gpuwaste.dashboard import queries, sqlbox
from gpuwaste.warehouse import Warehouse, damaged, refresh_catalog
from gpuwaste.warehouse.bounded import Bounds, query_frame
from gpuwaste.warehouse.catalog import connect
from gpuwaste.warehouse.readonly import read_only_connection
from tests.support.act_warehouse import two_jobs_warehouse
from tests.support.two_jobs import T0 as JOBS_T0

T0 = datetime(2026, 11, 1, tzinfo=UTC)
SIZES = (500, 4000, 1500, 9000)
SECONDS = 4.0
BOUNDS = Bounds(memory_mib=2048, timeout_s=None)


def rows(n: int) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "host": ["h"] * n,
            "gpu": [0] * n,
            "ts": [T0 + timedelta(seconds=i) for i in range(n)],
            "util": [float(i % 100) for i in range(n)],
        }
    )


def test_reads_never_fail_while_a_partition_is_replaced(data_dir: Path) -> None:
    wh = Warehouse(data_dir)
    frames = [rows(n) for n in SIZES]
    window = (T0, T0 + timedelta(hours=12))
    wh.replace_window("gpu_samples", "c1", *window, frames[0])
    refresh_catalog(data_dir)
    stop = threading.Event()
    seen: set[int] = set()
    errors: list[str] = []
    writes = [0]

    def writer() -> None:
        while not stop.is_set():
            writes[0] += 1
            wh.replace_window("gpu_samples", "c1", *window, frames[writes[0] % len(frames)])

    def sql_cli() -> None:  # as gpuwaste/cli.py `sql`
        while not stop.is_set():
            try:
                df = query_frame(data_dir, "select count(*) as n from gpu_samples", BOUNDS)
                assert df is not None
                seen.add(int(df["n"][0]))
            except duckdb.Error as exc:
                errors.append(f"sql: {exc}")

    def dashboard() -> (
        None
    ):  # a cursor on the cached connection, as dashboard/data.py; its SQL page
        con = read_only_connection(data_dir)
        while not stop.is_set():
            cur = con.cursor()
            try:
                seen.add(queries.table_counts(cur, ("gpu_samples",))["gpu_samples"])
                out = sqlbox.run(data_dir, "select count(*) as n, sum(util) from gpu_samples")
                if out.error:
                    errors.append(f"sql page: {out.error}")
                elif out.frame is not None:
                    seen.add(int(out.frame["n"][0]))
            except duckdb.Error as exc:
                errors.append(f"dashboard: {exc}")
            finally:
                cur.close()

    threads = [threading.Thread(target=f, daemon=True) for f in (writer, sql_cli, dashboard)]
    for t in threads:
        t.start()
    time.sleep(SECONDS)
    stop.set()
    for t in threads:
        t.join(timeout=30)
    assert writes[0] > 20, writes
    assert not errors, errors[:3]
    assert seen <= set(SIZES), seen  # whole partitions only
    assert len(seen) > 1


# ---------------------------------------------------------------------------------------------
# The readers that had no retry (issue 47, item 6: the Policies page showed `_duckdb.Error:
# Prefetch registered for bytes outside file` in 1 of 12 loads during `analyze --rebuild`), now
# on gpuwaste.warehouse.reading, while every file of an analyzed warehouse is replaced again
# and again by the same rows in another byte layout: no error, and every answer the same.
READS = 240  # at most this many reader calls, in at most
READ_SECONDS = 6.0
WRITE_PAUSE = 0.002  # between two files replaced


def _layouts(data_dir: Path) -> list[tuple[Path, bytes, bytes]]:
    """Each parquet file of the warehouse as two files of the same rows: uncompressed, and
    zstd in small row groups (other sizes, other footers: a reader that opens the file twice
    and gets one of each fails as under `analyze`)."""
    out = []
    con = duckdb.connect(":memory:")
    try:
        for path in sorted((data_dir / "parquet").rglob("*.parquet")):
            blobs = []
            for opts in ("compression uncompressed", "compression zstd, row_group_size 64"):
                tmp = path.with_name(path.name + ".layout.tmp-x")
                con.execute(
                    f"copy (select * from read_parquet('{path}', hive_partitioning = false)) "
                    f"to '{tmp}' (format parquet, {opts})"
                )
                blobs.append(tmp.read_bytes())
                tmp.unlink()
            out.append((path, blobs[0], blobs[1]))
    finally:
        con.close()
    return out


def _place(path: Path, blob: bytes) -> None:
    """As the store writes: a temporary file (which no reader reads), then one rename."""
    tmp = path.with_name(f"{path.name}.tmp-{threading.get_ident()}")
    tmp.write_bytes(blob)
    os.replace(tmp, path)


def _readers(data_dir: Path) -> dict[str, Callable[[], object]]:
    """Each reader as the product calls it, returning a value comparable across runs."""
    settings = Settings(data_dir=data_dir)
    rule = Rule(idle_hours=(0.05, 0.1))
    window = Window(JOBS_T0 - timedelta(days=1), JOBS_T0 + timedelta(days=1))

    def policy_replay() -> object:  # the Policies page and `gpuwaste policy replay`
        con = connect(data_dir)
        try:
            return (replay(con, rule).rows(), replay(con, rule, jobs=True).rows())
        finally:
            con.close()

    page_con = read_only_connection(data_dir)  # the dashboard's cached connection

    def policies_page() -> object:  # the Policies page: a cursor on it (dashboard/views)
        cur = page_con.cursor()
        try:
            return replay(cur, rule).rows()
        finally:
            cur.close()

    def notify_digest() -> object:  # `gpuwaste notify`
        con = connect(data_dir)
        try:
            f = window_figures(con, "c", window, 5)
            return (f.groups.sort("user", "vc").rows(), f.worst.sort("job_id").rows())
        finally:
            con.close()

    def job_report() -> object:  # `gpuwaste job`, and its closest ids for an unknown one
        job = gather(data_dir, "a", None, "http://127.0.0.1:8501")
        try:
            gather(data_dir, "b2", "c", "http://127.0.0.1:8501")
        except UnknownJob as exc:
            return (job.job, job.gpus.rows(), job.samples.height, exc.closest)
        raise AssertionError("job b2 found")

    def reports() -> object:  # `gpuwaste report`: a summary, with --vc, --since, a per-job table
        return (
            report(settings, "waste_by_vc", vc="vision").rows(),
            report(settings, "waste_by_vc", since=JOBS_T0 - timedelta(hours=1)).rows(),
            report(settings, "job_usage").rows(),
        )

    def fresh() -> object:  # `gpuwaste report freshness`, the Overview page
        return freshness(data_dir).drop("ingested_at").rows()

    return {
        "policy replay": policy_replay,
        "Policies page": policies_page,
        "notify digest": notify_digest,
        "job report": job_report,
        "report": reports,
        "freshness": fresh,
    }


class _CountedSleep:
    """damaged.read_retrying's `time`, counting the retries (each waits once before it)."""

    def __init__(self) -> None:
        self.retries = 0

    def sleep(self, seconds: float) -> None:
        self.retries += 1
        time.sleep(seconds)


def test_report_readers_never_fail_while_results_are_replaced(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    two_jobs_warehouse(data_dir)
    counted = _CountedSleep()
    monkeypatch.setattr(damaged, "time", counted)
    layouts = _layouts(data_dir)
    for path, first, _ in layouts:
        _place(path, first)
    readers = _readers(data_dir)
    expected = {name: read() for name, read in readers.items()}
    stop = threading.Event()
    writes = [0]
    errors: list[str] = []
    differ: list[str] = []
    calls = dict.fromkeys(readers, 0)

    def writer() -> None:  # one file at a time, each replaced about every 0.2 s
        while not stop.is_set():
            path, first, second = layouts[writes[0] % len(layouts)]
            writes[0] += 1
            _place(path, second if (writes[0] // len(layouts)) % 2 else first)
            time.sleep(WRITE_PAUSE)

    def reader() -> None:
        deadline = time.monotonic() + READ_SECONDS
        while sum(calls.values()) < READS and time.monotonic() < deadline:
            for name, read in readers.items():
                calls[name] += 1
                try:
                    if read() != expected[name]:
                        differ.append(name)
                except Exception as exc:  # a traceback on a page: what this test is about
                    errors.append(f"{name}: {type(exc).__name__}: {str(exc).splitlines()[0]}")

    w = threading.Thread(target=writer, daemon=True)
    w.start()
    readers_done = [threading.Thread(target=reader, daemon=True) for _ in range(2)]
    for t in readers_done:
        t.start()
    for t in readers_done:
        t.join(timeout=READ_SECONDS + 60)
    stop.set()
    w.join(timeout=30)
    print(
        f"{sum(calls.values())} reader calls {calls}, {writes[0]} files replaced, "
        f"{counted.retries} reads retried"
    )
    assert writes[0] > 2 * len(layouts), writes
    assert min(calls.values()) > 0, calls
    assert not errors, (len(errors), errors[:3])
    assert not differ, differ
