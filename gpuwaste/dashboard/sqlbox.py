"""The SQL page's engine: one read-only query, bounded in rows, memory and time. Pure of
Streamlit.

Two locks stand before a query runs (gpuwaste.warehouse.readonly): `check_read_only` refuses
anything but one SELECT, and the connection cannot reach files outside the warehouse, install or
load extensions, or attach databases. The query runs in a process of its own
(gpuwaste.warehouse.bounded.run_in_child, about 1 s to start) under `[sql] memory_mib`, killed
after `[sql] page_timeout_s`: the dashboard, shared by every session, never holds more than the
rows shown.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import duckdb
import polars as pl

from gpuwaste.config import SqlSettings
from gpuwaste.warehouse.bounded import BoundExceeded, Bounds, run_in_child
from gpuwaste.warehouse.readonly import QueryRefused
from gpuwaste.warehouse.schema import Table, all_tables

MAX_ROWS = 10_000
TIMEOUT_S = SqlSettings().page_timeout_s
MEMORY_MIB = SqlSettings().memory_mib


@dataclass(frozen=True)
class Outcome:
    frame: pl.DataFrame | None = None
    error: str | None = None  # DuckDB's or the refusal's message, shown as text
    truncated: bool = False
    elapsed_s: float = 0.0


def run(
    data_dir: Path,
    sql: str,
    max_rows: int = MAX_ROWS,
    timeout_s: float = TIMEOUT_S,
    memory_mib: int = MEMORY_MIB,
) -> Outcome:
    """Check and run `sql` over the warehouse at `data_dir`, read-only and bounded; never raises
    for a bad query."""
    bounds = Bounds(memory_mib, timeout_s, time_key="[sql] page_timeout_s in gpuwaste.toml")
    t0 = time.perf_counter()
    try:
        df = run_in_child(data_dir, sql, bounds, max_rows)
    except QueryRefused as exc:
        return Outcome(error=f"Refused: {exc}")
    except BoundExceeded as exc:
        text = str(exc)
        return Outcome(error=text[0].upper() + text[1:])
    except duckdb.Error as exc:
        return Outcome(error=str(exc).strip())
    if df is None:
        return Outcome(frame=pl.DataFrame(), elapsed_s=time.perf_counter() - t0)
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
