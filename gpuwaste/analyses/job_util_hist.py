"""Per-minute GPU utilization per job [Philly §3, Figure 5 and Table 3].

Definition (docs/definitions.md, "Cluster-level views"): the CDF of per-minute GPU utilization by
job size and final status. Philly sampled once a minute; here a minute (counted from the attempt's
start) of one GPU has the time-weighted mean utilization of the samples in it, and weighs the
seconds of data in it. Stored per job as GPU-minutes in 1-point buckets (0..100) so that the
cluster summaries (util_by_size_status, util_minute_hist, util_by_spread) can be re-aggregated
when only some jobs change.

Grain: one row per job x bucket. Units: GPU-minutes.
"""

from __future__ import annotations

import duckdb
import polars as pl

from gpuwaste.analyses.sqlfiles import load_sql


def compute(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """Needs the `util_minutes` table of this batch."""
    return con.sql(load_sql("analyses/job_util_hist")).pl()
