"""Reads while a partition is replaced again and again: no reader ever gets an error or a torn
partition.

Found here: DuckDB opens a parquet file more than once in a query (footer at bind, row groups at
scan), so an atomic rename between the two made `gpuwaste sql` and the dashboard fail with
"TProtocolException: Invalid data" or "Prefetch registered for bytes outside file" (about 1 in
150 queries under a writer that never stops). Fixed by `damaged.read_retrying` in the read
paths (`gpuwaste sql`, dashboard queries and SQL page).
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import polars as pl

from gpuwaste.dashboard import queries, sqlbox
from gpuwaste.warehouse import Warehouse, refresh_catalog
from gpuwaste.warehouse.bounded import Bounds, query_frame
from gpuwaste.warehouse.readonly import read_only_connection

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
