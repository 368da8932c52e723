"""Each allocated sample classified (`sql/staging/gpu_intervals.sql` + `sample_flags.sql`), in
polars, over the job_samples frame.

The SQL files are the definitions an operator reads: the sampling interval a GPU's gaps are
judged by [ICSE24 §3.2: the configured one, else the median spacing of its own samples], the
seconds each sample stands for (time weighting: sample j stands for (t_(j-1), t_j], a stretch
longer than `missing_gap_intervals` intervals is missing data), and where runs of idle samples or
of equal memory readings open and close. This module computes the same rows once per batch
(the SQL view was evaluated again by each of its four readers); tests/test_job_samples.py
checks that both agree.
"""

from __future__ import annotations

import polars as pl

from gpuwaste.config import Thresholds


def _interval(t: Thresholds) -> pl.Expr:
    """Per row, its allocation's interval: configured, else the median spacing of its samples
    (first sample and repeated timestamps left out), else the fallback."""
    if t.sampling_interval_s is not None:
        return pl.lit(float(t.sampling_interval_s), pl.Float64)
    spacing = pl.col("dt_s").filter(~pl.col("is_first") & (pl.col("dt_s") > 0))
    return spacing.median().over("alloc_id").fill_null(float(t.fallback_interval_s))


def compute(samples: pl.DataFrame, t: Thresholds) -> pl.DataFrame:
    """Pure: job_samples rows -> sample_flags rows (same order as `samples`)."""
    limits = samples.with_columns(_interval(t).alias("interval_s")).with_columns(
        (pl.col("interval_s") * float(t.missing_gap_intervals)).alias("gap_limit_s")
    )
    limit = pl.col("gap_limit_s")
    dt, next_dt = pl.col("dt_s"), pl.col("next_dt_s")
    gap_after = (next_dt > limit).fill_null(True)
    return limits.with_columns(
        pl.when(dt <= limit).then(dt).otherwise(0.0).alias("covered_s"),
        pl.when(next_dt.is_null() & (pl.col("tail_s") <= limit))
        .then(pl.col("tail_s"))
        .otherwise(0.0)
        .alias("tail_covered_s"),
        (dt > limit).alias("gap_before"),
        (pl.col("prev_idle").ne_missing(pl.col("idle")) | (dt > limit)).alias("run_start"),
        (pl.col("next_idle").ne_missing(pl.col("idle")) | gap_after).alias("run_end"),
        (pl.col("prev_mem").ne_missing(pl.col("mem_used_mib")) | (dt > limit)).alias("level_start"),
        (pl.col("next_mem").ne_missing(pl.col("mem_used_mib")) | gap_after).alias("level_end"),
    )
