"""The SQL page's engine: one read-only query, bounded in rows and time. Pure of Streamlit.

Two locks stand before a query runs (gpuwaste.warehouse.readonly): `check_read_only` refuses
anything but one SELECT, and the connection cannot reach files outside the warehouse, install or
load extensions, or attach databases. A timer interrupts a query that runs too long.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import duckdb
import polars as pl

from gpuwaste.warehouse.reading import read_query
from gpuwaste.warehouse.readonly import QueryRefused, check_read_only
from gpuwaste.warehouse.schema import Table, all_tables

MAX_ROWS = 10_000
TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Outcome:
    frame: pl.DataFrame | None = None
    error: str | None = None  # DuckDB's or the refusal's message, shown as text
    truncated: bool = False
    elapsed_s: float = 0.0


def run(
    con: duckdb.DuckDBPyConnection, sql: str, max_rows: int = MAX_ROWS, timeout_s: float = TIMEOUT_S
) -> Outcome:
    """Check and run `sql` on `con` (a read-only connection); never raises for a bad query."""
    try:
        check_read_only(sql)
    except QueryRefused as exc:
        return Outcome(error=f"Refused: {exc}")
    timer = threading.Timer(timeout_s, con.interrupt)
    t0 = time.perf_counter()
    timer.start()
    try:
        df = read_query(con, sql, limit=max_rows + 1)  # retried, as every read
        if df is None:
            return Outcome(frame=pl.DataFrame(), elapsed_s=time.perf_counter() - t0)
    except duckdb.InterruptException:
        return Outcome(error=f"The query ran longer than {timeout_s:g} s and was stopped.")
    except duckdb.Error as exc:
        return Outcome(error=str(exc).strip())
    finally:
        timer.cancel()
    assert isinstance(df, pl.DataFrame)
    truncated = df.height > max_rows
    return Outcome(frame=df.head(max_rows), truncated=truncated, elapsed_s=time.perf_counter() - t0)


def example(t: Table) -> str:
    """A query that shows what a table holds."""
    cols = ", ".join(f'"{c}"' if c == "user" else c for c in list(t.columns)[:8])
    if t.name == "gpu_samples":
        return "SELECT cluster, host, gpu, ts, util, mem_used_mib, job_id\nFROM gpu_samples\nORDER BY ts DESC\nLIMIT 100"
    if t.name == "job_usage":
        return (
            'SELECT vc, "user", count(*) AS jobs,\n       round(sum(idle_slot_gpu_s + never_used_gpu_s) / 3600, 1) AS lost_gpu_h\n'
            "FROM job_usage\nGROUP BY ALL\nORDER BY lost_gpu_h DESC\nLIMIT 20"
        )
    if "vc" in t.columns and t.result:
        return f"SELECT {cols}\nFROM {t.name}\nWHERE vc = '(all)'\nLIMIT 100"
    return f"SELECT {cols}\nFROM {t.name}\nLIMIT 100"


def table_list() -> pl.DataFrame:
    rows = [
        {"table": t.name, "kind": "result" if t.result else "fact", "columns": ", ".join(t.columns),
         "about": t.doc}
        for t in all_tables().values()
    ]  # fmt: skip
    return pl.DataFrame(rows)
