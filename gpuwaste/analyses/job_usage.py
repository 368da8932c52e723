"""Per job usage, flags and diagnoses [ICSE24 §3.2, Table 1; CloudBrain §III-B, §IV-B, §IV-C].

Definitions (docs/definitions.md):
- job U = mean over its GPUs of U_i (job_gpu_usage); GPU memory utilization likewise, with the
  maximum beside the mean; CPU and host memory: the mean of each host's series during the job,
  then the mean over its hosts [CloudBrain §III-B].
- size class [Philly Table 3]: 1, 2-4, 5-8, >8 GPUs; queueing delay: submission to first start.
- debugging [CloudBrain §IV-C1, ICSE24 §4.1]: declared by the scheduler (`jobs.is_debug`), or
  **choice** inferred when idle-slot time exceeds `infer_debug_idle_share` (50 %) of the job's GPU
  time and it has at least `infer_debug_min_slots` (3) idle slots; kept apart.
- `idle_share`: share of GPU time in idle slots or on never-used GPUs (the "unused" share of
  CloudBrain §IV-C1). `hit_time_limit`: ran at least `debug_max_duration_h` minus
  `debug_limit_tolerance_s`, or ended in TIMEOUT.
- fluctuating [CloudBrain §IV-B] **choice**: 120 s windows from each attempt's start; a window of
  one GPU fluctuates when max - min utilization exceeds 90 points; the job when more than 75 % of
  its GPU windows do (GPU utilization only: host samples are too coarse for 120 s windows).
- diagnoses [ICSE24 Table 1] for jobs with U <= `low_util_pct` that have enough data:
  improper_batch_size, insufficient_gpu_memory, gpu_oversubscription, unreleased_job
  (idle over the final `unreleased_min_s`), slow_start (idle over the first `slow_start_min_s`),
  non_dl_job (no GPU ever used while CPU utilization > `very_low_pct`), interactive_job,
  synchronous_checkpointing.
- checkpointing [ICSE24 Table 1] **choice**: some GPU of the job drops to utilization 0 at least
  `checkpoint_min_dips` (3) times between busy stretches, with dip-to-dip spacing varying by
  under `checkpoint_spacing_tolerance` (20 %) of its mean (sql/staging/job_checkpoint.sql); kept
  as its own flag for every job, and a diagnosis for the low-utilization ones.
- a running job (no end yet) is analyzed up to the watermark and marked `running`.

Grain: one row per job. Units: seconds, percent 0-100, MiB.
"""

from __future__ import annotations

import duckdb
import polars as pl

from gpuwaste.analyses.sqlfiles import load_sql


def compute(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """Needs the batch tables named in `sql/analyses/job_usage.sql`."""
    return con.sql(load_sql("analyses/job_usage")).pl()
