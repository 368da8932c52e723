"""waste_by_vc [CloudBrain §IV-C, Table IV].

Definition (docs/definitions.md): Idle-slot and never-used GPU time, each as a percent of the GPU time of the jobs of
that kind ("among its own job") and of all jobs of the VC ("among all the jobs"); split into
declared debugging, inferred debugging and non-debugging jobs, with totals.

Grain: one row per VC (and '(all)') x kind. Units: seconds, percent 0-100. SQL: `sql/analyses/waste_by_vc.sql`.
"""

from __future__ import annotations

import duckdb
import polars as pl

from gpuwaste.analyses.sqlfiles import load_sql

NAME = "waste_by_vc"


def compute(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """Over the result tables of one cluster (variables `cluster` and the thresholds set)."""
    return con.sql(load_sql("analyses/waste_by_vc")).pl()
