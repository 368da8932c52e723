"""stable_phase_grid [CloudBrain §IV-B, Table III].

Definition (docs/definitions.md): For t in `stable_phase_lengths_s` and m in `stable_phase_idle_gib`, the percentage
of all GPU time that lies in stable phases (phases longer than t whose idle memory exceeds m).

Grain: one row per VC (and '(all)') x t x m. Units: seconds, percent 0-100. SQL: `sql/analyses/stable_phase_grid.sql`.
"""

from __future__ import annotations

import duckdb
import polars as pl

from gpuwaste.analyses.sqlfiles import load_sql

NAME = "stable_phase_grid"


def compute(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """Over the result tables of one cluster (variables `cluster` and the thresholds set)."""
    return con.sql(load_sql("analyses/stable_phase_grid")).pl()
