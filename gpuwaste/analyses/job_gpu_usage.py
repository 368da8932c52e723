"""Per job x GPU usage [ICSE24 §3.2; CloudBrain §III-B, §IV-C].

Definitions (docs/definitions.md): for GPU i of a job with samples u_ij at times t_j,
U_i = sum_j u_ij (t_j - t_(j-1)) / (t_K - t_0), time-weighted; **choice**: a gap between samples
longer than `missing_gap_intervals` (3) sampling intervals is *missing data*, counted neither
idle nor busy, so the denominator here is the observed seconds and `missing_s` is reported
beside. The sampling interval is `sampling_interval_s`, else the median spacing of the GPU's own
samples (`fallback_interval_s` with fewer than two). A *never-used GPU* is an allocated GPU not
used at any time of the job (every sample idle); its observed time is `never_used_s`.

Grain: one row per job x attempt x allocated GPU, with
idle_slot_s + never_used_s + busy_s + missing_s = alloc_s, where busy is observed time outside
idle slots (idle runs of 60 s or less count as busy). `low_data` marks a GPU observed for less
than `min_observed_share` of its allocation: it is flagged, not judged.
Units: seconds, percent 0-100, MiB.
"""

from __future__ import annotations

import duckdb
import polars as pl

from gpuwaste.analyses.sqlfiles import load_sql


def compute(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """Needs `analyze_alloc`, `gpu_sample_stats`, `batch_idle_slots`, `batch_phase_counts`."""
    return con.sql(load_sql("analyses/job_gpu_usage")).pl()
