"""Each allocated sample classified, in polars and one compiled loop, over the job_samples frame.

This module is the definition: the sampling interval a GPU's gaps are
judged by [ICSE24 §3.2: the configured one, else the median spacing of its own samples], the
seconds each sample stands for (time weighting: sample j stands for (t_(j-1), t_j], a stretch
longer than `missing_gap_intervals` intervals is missing data), and where runs of idle samples or
of equal memory readings open and close, once per host range (a SQL view was evaluated again
by each of its four readers). A run is a stretch of samples with the same (idle, held) flags:
idle runs are CloudBrain's, held runs (utilization 0, memory above the floor) #44's.
tests/test_job_samples.py checks it against its test oracles
(tests/oracles/gpu_intervals.sql, sample_flags.sql). The median spacing is a compiled loop
(numba) over each allocation's rows, a selection where polars grouped and sorted them (faster:
docs/history/bench-analyze.md, "Compiled loops per allocation"), and
it is DuckDB's median, the mean of the two middle spacings, where polars' differed in the last
bit for about one pair in eleven.
"""

from __future__ import annotations

import numba
import numpy as np
import polars as pl

from gpuwaste.analyses.alloc_rows import by_allocation
from gpuwaste.config import Thresholds


@numba.njit(cache=True, nogil=True)
def _median_spacing(starts: np.ndarray, dt_s: np.ndarray, spaced: np.ndarray) -> np.ndarray:
    """Per row, the median of `dt_s` over its allocation's rows (from starts[a] to
    starts[a + 1]) where `spaced` (NaN: none), as DuckDB's median: the middle value, or the mean
    of the two middle ones, (lower + upper) / 2. One selection per allocation (linear), none when
    every spacing is the same."""
    out = np.empty(len(dt_s))
    values = np.empty(len(dt_s))
    for a in range(len(starts) - 1):
        lo, hi = starts[a], starts[a + 1]
        k = 0
        least, most = np.inf, -np.inf
        for i in range(lo, hi):
            if spaced[i]:
                values[k] = dt_s[i]
                least, most = min(least, dt_s[i]), max(most, dt_s[i])
                k += 1
        if k == 0:
            median = np.nan
        elif least == most:
            median = least
        else:
            part = np.partition(values[:k], k // 2)
            upper = part[k // 2]
            median = upper if k % 2 else (part[: k // 2].max() + upper) / 2
        out[lo:hi] = median
    return out


def _interval(samples: pl.DataFrame, t: Thresholds) -> pl.Expr | pl.Series:
    """Per row of `samples`, its allocation's interval: configured, else the median spacing of
    its samples (first sample and repeated timestamps left out), else the fallback."""
    if t.sampling_interval_s is not None:
        return pl.lit(float(t.sampling_interval_s), pl.Float64)
    if not samples.height:
        return pl.lit(None, pl.Float64)
    rows, starts, back = by_allocation(samples.select("alloc_id", "ts", "dt_s", "is_first"))
    median = _median_spacing(
        starts,
        rows["dt_s"].cast(pl.Float64).to_numpy(),
        (~rows["is_first"] & (rows["dt_s"] > 0)).to_numpy(),
    )
    if back is not None:  # sorted: back to the rows' order
        median[back] = median.copy()
    return pl.Series("interval_s", median, nan_to_null=True).fill_null(float(t.fallback_interval_s))


def compute(job_samples: pl.DataFrame, t: Thresholds) -> pl.DataFrame:
    """Pure: job_samples rows -> sample_flags rows (same order as `job_samples`)."""
    limits = job_samples.with_columns(_interval(job_samples, t).alias("interval_s")).with_columns(
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
        # runs of equal (idle, held): an idle run's edges are as CloudBrain's, and a held
        # stretch (utilization 0, memory held) is a run of its own (idle_slots.py)
        (
            pl.col("prev_idle").ne_missing(pl.col("idle"))
            | pl.col("prev_held").ne_missing(pl.col("held"))
            | (dt > limit)
        ).alias("run_start"),
        (
            pl.col("next_idle").ne_missing(pl.col("idle"))
            | pl.col("next_held").ne_missing(pl.col("held"))
            | gap_after
        ).alias("run_end"),
        (pl.col("prev_mem").ne_missing(pl.col("mem_used_mib")) | (dt > limit)).alias("level_start"),
        (pl.col("next_mem").ne_missing(pl.col("mem_used_mib")) | gap_after).alias("level_end"),
    )
