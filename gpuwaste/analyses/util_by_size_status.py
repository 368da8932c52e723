"""util_by_size_status [Philly §3, Table 3].

Definition (docs/definitions.md): Mean GPU utilization by job size (1, 4, 8, 16 GPUs, all) x final status (and all),
weighted by observed GPU-minutes.

Grain: one row per VC (and '(all)') x size x status. Units: seconds, percent 0-100. SQL: `sql/analyses/util_by_size_status.sql`.
"""

from __future__ import annotations

import duckdb
import polars as pl

from gpuwaste.analyses.sqlfiles import load_sql

NAME = "util_by_size_status"


def compute(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """Over the result tables of one cluster (variables `cluster` and the thresholds set)."""
    return con.sql(load_sql("analyses/util_by_size_status")).pl()
