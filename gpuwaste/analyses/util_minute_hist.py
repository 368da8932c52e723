"""util_minute_hist [Philly §3, Figure 5].

Definition (docs/definitions.md): Per-minute GPU utilization as GPU-minutes in 1-point buckets by job size x final
status; cumulate for the CDF of the figure.

Grain: one row per VC (and '(all)') x size x status x bucket. Units: seconds, percent 0-100. SQL: `sql/analyses/util_minute_hist.sql`.
"""

from __future__ import annotations

import duckdb
import polars as pl

from gpuwaste.analyses.sqlfiles import load_sql

NAME = "util_minute_hist"


def compute(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """Over the result tables of one cluster (variables `cluster` and the thresholds set)."""
    return con.sql(load_sql("analyses/util_minute_hist")).pl()
