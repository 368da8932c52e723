"""jobs_by_status [Philly §4, Table 6].

Definition (docs/definitions.md): Jobs and GPU time by final status (passed, killed, unsuccessful; running jobs apart).

Grain: one row per VC (and '(all)') x status. Units: seconds, percent 0-100. SQL: `sql/analyses/jobs_by_status.sql`.
"""

from __future__ import annotations

import duckdb
import polars as pl

from gpuwaste.analyses.sqlfiles import load_sql

NAME = "jobs_by_status"


def compute(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """Over the result tables of one cluster (variables `cluster` and the thresholds set)."""
    return con.sql(load_sql("analyses/jobs_by_status")).pl()
