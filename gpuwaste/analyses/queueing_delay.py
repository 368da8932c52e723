"""queueing_delay [Philly §3].

Definition (docs/definitions.md): Queueing delay: time from submission to the start of the first attempt, by job size
class and VC: mean, 50th, 90th, 99th percentiles.

Grain: one row per VC (and '(all)') x size class (and 'all'). Units: seconds, percent 0-100. SQL: `sql/analyses/queueing_delay.sql`.
"""

from __future__ import annotations

import duckdb
import polars as pl

from gpuwaste.analyses.sqlfiles import load_sql

NAME = "queueing_delay"


def compute(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """Over the result tables of one cluster (variables `cluster` and the thresholds set)."""
    return con.sql(load_sql("analyses/queueing_delay")).pl()
