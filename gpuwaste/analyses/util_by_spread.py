"""util_by_spread [Philly §3, Table 5].

Definition (docs/definitions.md): GPU utilization of 16-GPU jobs by the number of servers they are spread over: mean
(observed-time weighted) and the 50th, 90th, 95th percentiles of per-minute utilization.

Grain: one row per VC (and '(all)') x number of servers. Units: seconds, percent 0-100. SQL: `sql/analyses/util_by_spread.sql`.
"""

from __future__ import annotations

import duckdb
import polars as pl

from gpuwaste.analyses.sqlfiles import load_sql

NAME = "util_by_spread"


def compute(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """Over the result tables of one cluster (variables `cluster` and the thresholds set)."""
    return con.sql(load_sql("analyses/util_by_spread")).pl()
