"""debug_jobs [CloudBrain §IV-C1, ICSE24 §4.1].

Definition (docs/definitions.md): Debugging jobs, declared and inferred kept apart: the share that reaches the maximum
duration for debugging jobs (`debug_max_duration_h`) and the share whose GPUs are unused
(idle slots or never used) for `debug_unused_share` (80 %) of their GPU time or more.

Grain: one row per VC (and '(all)') x kind (declared | inferred | any). Units: seconds, percent 0-100. SQL: `sql/analyses/debug_jobs.sql`.
"""

from __future__ import annotations

import duckdb
import polars as pl

from gpuwaste.analyses.sqlfiles import load_sql

NAME = "debug_jobs"


def compute(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """Over the result tables of one cluster (variables `cluster` and the thresholds set)."""
    return con.sql(load_sql("analyses/debug_jobs")).pl()
