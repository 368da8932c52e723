"""Idle slots of a job's GPUs [CloudBrain §IV-C].

Definition (docs/definitions.md, "Non-continuous use"): an *idle slot* of a job's GPU is a period
longer than 60 s (`idle_slot_min_s`, strictly longer) in which the GPU is not used at all: GPU
utilization = 0 and GPU memory used = 0; **choice**: "memory used = 0" means at or under
`idle_mem_floor_mib` (default 0 MiB). Missing data is never idle: a gap longer than
`missing_gap_intervals` sampling intervals ends a run. A never-used GPU has no idle slots (its
whole observed time is never-used time, see job_gpu_usage).

Grain: one row per idle slot of a job x attempt x GPU; start_ts/end_ts are the edges of the time
its idle samples stand for (sample j stands for (t_(j-1), t_j]). Units: seconds.
"""

from __future__ import annotations

import duckdb
import polars as pl

from gpuwaste.analyses.sqlfiles import load_sql


def compute(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """Idle slots of this batch (needs the `sample_flags` view and `gpu_sample_stats`)."""
    return con.sql(load_sql("analyses/idle_slots")).pl()
