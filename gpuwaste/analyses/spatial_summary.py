"""spatial_summary [CloudBrain §IV-A, §IV-B].

Definition (docs/definitions.md): Means and maxima of GPU, GPU memory, CPU and host memory utilization over jobs; shares
of jobs under the thresholds (`low_share_pct`, `very_low_pct`), mismatch shares
(`mismatch_high_pct` vs `mismatch_low_pct`), fluctuating jobs, jobs with more than one stable phase
and whose phase levels differ by more than 1 and 8 GiB. Jobs flagged low_data are left out.

Grain: one row per VC (and '(all)') x metric. Units: seconds, percent 0-100. SQL: `sql/analyses/spatial_summary.sql`.
"""

from __future__ import annotations

import duckdb
import polars as pl

from gpuwaste.analyses.sqlfiles import load_sql

NAME = "spatial_summary"


def compute(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """Over the result tables of one cluster (variables `cluster` and the thresholds set)."""
    return con.sql(load_sql("analyses/spatial_summary")).pl()
