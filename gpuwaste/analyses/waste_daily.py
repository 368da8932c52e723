"""waste_daily: GPU hours per UTC day by kind, for the dashboard's trend line.

Definition: allocated GPU time (docs/definitions.md, "Allocation") split into busy, idle-slot
[CloudBrain §IV-C], never-used [CloudBrain §IV-C] and no-data (missing, [ICSE24 §3.2] choice)
hours, which add up to the allocated hours; beside them the GPU hours of debugging jobs
(declared or inferred), failed (unsuccessful) and killed jobs [Philly §4]. An allocation is split
across the days it spans in proportion to its overlap with each day.

Grain: one row per VC (and '(all)') x UTC day. Units: GPU hours. SQL: `sql/analyses/waste_daily.sql`.
"""

from __future__ import annotations

import duckdb
import polars as pl

from gpuwaste.analyses.sqlfiles import load_sql

NAME = "waste_daily"


def compute(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """Over the result tables of one cluster (variable `cluster` set)."""
    return con.sql(load_sql("analyses/waste_daily")).pl()
