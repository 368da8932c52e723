"""never_used_by_size [CloudBrain §IV-C, Table V].

Definition (docs/definitions.md): By number of GPUs requested (1, 2, 4, 8, 16, other), the number and share of jobs
that have at least one never-used GPU (jobs with no GPU time are left out).

Grain: one row per VC (and '(all)') x GPUs requested (and 'all'). Units: seconds, percent 0-100. SQL: `sql/analyses/never_used_by_size.sql`.
"""

from __future__ import annotations

import duckdb
import polars as pl

from gpuwaste.analyses.sqlfiles import load_sql

NAME = "never_used_by_size"


def compute(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """Over the result tables of one cluster (variables `cluster` and the thresholds set)."""
    return con.sql(load_sql("analyses/never_used_by_size")).pl()
