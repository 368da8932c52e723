"""Per allocation, in compiled passes over the sample_flags frame: the time-weighted statistics
(`gpu_sample_stats`), the fluctuating windows (`fluctuation`), the checkpointing dips
(`checkpointing`) and the minutes by utilization bucket (`util_buckets`, `util_hist`).

This module is their definition [ICSE24 §3.2 and Table 1, CloudBrain §IV-B and §IV-C, Philly
§3]; the docstrings below say each rule. Each allocation's rows come contiguous and in time order from the
per-sample pass (job_samples.py; rows in any other order are sorted first,
`alloc_rows.by_allocation`), so every figure here is a running sum, count, lowest or highest
over one allocation's rows, or over one window or minute of them, and numba computes them all
in two loops over the rows (`_allocation_loop`, `_minute_loop`) on one core without the GIL,
beside the other steps. Five steps of numpy and polars did this before, each converting,
checking and reducing the frame again (bench/RESULTS.md). Sums run in row order, as the SQL's
sums over ordered rows would. tests/test_job_samples.py checks the statistics and the checkpointing
against their test oracles (tests/oracles/gpu_sample_stats.sql, job_checkpoint.sql), and the
minutes, buckets and fluctuating windows on hand-computed cases.

The loops compile on their first call and are cached beside this module (`cache=True`), so
later processes only load them.
"""

from __future__ import annotations

import numba
import numpy as np
import polars as pl

from gpuwaste.analyses.alloc_rows import by_allocation, nullable, nulls_where
from gpuwaste.config import Thresholds

BUCKETS = 101  # 0..100: one per utilization point
STEADY = 1e-9  # added before rounding down: a steady 30 % may divide to 29.999999999999996

STATS_SCHEMA: dict[str, pl.DataType] = {
    "alloc_id": pl.Int64(),
    "interval_s": pl.Float64(),
    "samples": pl.Int64(),
    "observed_s": pl.Float64(),
    "util_mean": pl.Float64(),
    "util_max": pl.Float64(),
    "mem_used_mean_mib": pl.Float64(),
    "mem_used_max_mib": pl.Float64(),
    "mem_total_mib": pl.Float64(),
    "never_used": pl.Boolean(),
}
# Per allocation: the statistics, its fluctuation windows and its checkpointing dips (the SQL's
# per_gpu: spacing_spread is null with fewer than two dips or dips at one instant).
SUMS_SCHEMA: dict[str, pl.DataType] = {
    **STATS_SCHEMA,
    "windows": pl.Int64(),
    "fluctuating_windows": pl.Int64(),
    "dips": pl.Int64(),
    "spacing_spread": pl.Float64(),
}
BUCKETS_SCHEMA: dict[str, pl.DataType] = {
    "alloc_id": pl.Int64(),
    "bucket": pl.Int16(),
    "weight_s": pl.Float64(),
}
HIST_SCHEMA: dict[str, pl.DataType] = {
    "job_id": pl.String(),
    "bucket": pl.Int16(),
    "gpu_minutes": pl.Float64(),
}
FLUCTUATION_SCHEMA: dict[str, pl.DataType] = {
    "job_id": pl.String(),
    "windows": pl.Int64(),
    "fluctuating_windows": pl.Int64(),
}
CHECKPOINT_SCHEMA: dict[str, pl.DataType] = {
    "job_id": pl.String(),
    "checkpointing_gpus": pl.Int64(),
}
_NEVER = -(2**63)  # the lowest int64 microsecond: before every sample


# The rows of `_allocation_loop`'s results: floats (seconds observed, sums of utilization and
# memory times seconds, highest readings (-inf: none), the sum, lowest and highest spacing of the
# dips), counts and flags.
OBSERVED, UTIL_S, UTIL_MAX, MEM_S, MEM_MAX, TOTAL_MAX, GAP_SUM, GAP_MIN, GAP_MAX = range(9)
WINDOWS, FLUCTUATING, DIPS = range(3)
ANY_MEM, ANY_TOTAL, NEVER_USED = range(3)


@numba.njit(cache=True, nogil=True)
def _allocation_loop(
    starts: np.ndarray,
    ts: np.ndarray,
    util: np.ndarray,
    mem: np.ndarray,
    has_mem: np.ndarray,
    total: np.ndarray,
    has_total: np.ndarray,
    idle: np.ndarray,
    covered: np.ndarray,
    tail_covered: np.ndarray,
    window_no: np.ndarray,
    prev_util: np.ndarray,
    has_prev_util: np.ndarray,
    range_pct: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per allocation (its rows from starts[a] to starts[a + 1]): its floats, counts (windows,
    fluctuating windows, dips) and flags (any memory reading, any capacity, never used), each
    a row of one array, column a."""
    m = len(starts) - 1
    f = np.zeros((9, m))
    for row in (UTIL_MAX, MEM_MAX, TOTAL_MAX, GAP_MAX):
        f[row] = -np.inf
    f[GAP_MIN] = np.inf
    n = np.zeros((3, m), np.int64)
    flag = np.zeros((3, m), np.bool_)
    flag[NEVER_USED] = True
    for a in range(m):
        lo, hi = starts[a], starts[a + 1]
        last_busy = _NEVER  # a dip comes before the last busy sample
        for i in range(lo, hi):
            if util[i] > 0:
                last_busy = ts[i]
        window_lo, window_hi = np.inf, -np.inf
        last_dip = 0
        for i in range(lo, hi):
            u, w = util[i], covered[i] + tail_covered[i]
            f[OBSERVED, a] += w
            f[UTIL_S, a] += u * w
            f[UTIL_MAX, a] = max(f[UTIL_MAX, a], u)
            if has_mem[i]:
                flag[ANY_MEM, a] = True
                f[MEM_S, a] += mem[i] * w
                f[MEM_MAX, a] = max(f[MEM_MAX, a], mem[i])
            if has_total[i]:
                flag[ANY_TOTAL, a] = True
                f[TOTAL_MAX, a] = max(f[TOTAL_MAX, a], total[i])
            if not idle[i]:
                flag[NEVER_USED, a] = False
            if i > lo and window_no[i] != window_no[i - 1]:  # a window ends
                n[WINDOWS, a] += 1
                if window_hi - window_lo > range_pct:
                    n[FLUCTUATING, a] += 1
                window_lo, window_hi = np.inf, -np.inf
            window_lo, window_hi = min(window_lo, u), max(window_hi, u)
            if u == 0 and has_prev_util[i] and prev_util[i] > 0 and ts[i] < last_busy:
                if n[DIPS, a] > 0:
                    gap = (ts[i] - last_dip) / 1e6
                    f[GAP_SUM, a] += gap
                    f[GAP_MIN, a] = min(f[GAP_MIN, a], gap)
                    f[GAP_MAX, a] = max(f[GAP_MAX, a], gap)
                n[DIPS, a] += 1
                last_dip = ts[i]
        n[WINDOWS, a] += 1  # the last window
        if window_hi - window_lo > range_pct:
            n[FLUCTUATING, a] += 1
    return f, n, flag


@numba.njit(cache=True, nogil=True)
def _minute_loop(
    starts: np.ndarray,
    util: np.ndarray,
    covered: np.ndarray,
    tail_covered: np.ndarray,
    window_no: np.ndarray,
    minute: np.ndarray,
) -> np.ndarray:
    """Per allocation x utilization bucket, the seconds of its minutes with data (a minute since
    the attempt's start, within one fluctuation window: a minute two windows share is two)
    whose time-weighted mean falls in that bucket."""
    m = len(starts) - 1
    seconds = np.zeros((m, BUCKETS))
    for a in range(m):
        lo, hi = starts[a], starts[a + 1]
        util_s, weight_s = 0.0, 0.0
        for i in range(lo, hi + 1):
            ends = i == hi or (
                i > lo and (window_no[i] != window_no[i - 1] or minute[i] != minute[i - 1])
            )
            if ends:
                if weight_s > 0:
                    bucket = min(max(np.floor(util_s / weight_s + STEADY), 0.0), BUCKETS - 1.0)
                    seconds[a, int(bucket)] += weight_s
                util_s, weight_s = 0.0, 0.0
            if i < hi:
                w = covered[i] + tail_covered[i]
                util_s += util[i] * w
                weight_s += w
    return seconds


def _ordered(flags: pl.DataFrame, columns: list[pl.Expr | str]) -> tuple[pl.DataFrame, np.ndarray]:
    """`columns` of `flags` (at least one row) with each allocation's rows contiguous and in
    time order (sorted when they are not), and where each allocation's rows start (and, last,
    the end of the rows)."""
    cols, starts, _ = by_allocation(flags.select(pl.col("alloc_id").cast(pl.Int64), "ts", *columns))
    return cols, starts


def compute(sample_flags: pl.DataFrame, t: Thresholds) -> pl.DataFrame:
    """Pure: sample_flags rows (alloc_id, ts, interval_s, util, mem_used_mib, mem_total_mib,
    idle, covered_s, tail_covered_s, window_no, prev_util; util and idle never null) -> per
    allocation, the rows of gpu_sample_stats.sql (null as in SQL: a mean over no seconds, a
    highest of no readings), its windows and fluctuating windows (`fluctuation` per GPU)
    and its dips and their spacing's spread (job_checkpoint.sql's per_gpu)."""
    if not sample_flags.height:
        return pl.DataFrame(schema=SUMS_SCHEMA)
    cols, starts = _ordered(
        sample_flags,
        [
            pl.col("interval_s").cast(pl.Float64),
            "util",
            "mem_used_mib",
            "mem_total_mib",
            "idle",
            pl.col("covered_s").cast(pl.Float64),
            pl.col("tail_covered_s").cast(pl.Float64),
            pl.col("window_no").cast(pl.Float64),
            "prev_util",
        ],
    )
    mem, has_mem = nullable(cols["mem_used_mib"])
    total, has_total = nullable(cols["mem_total_mib"])
    prev_util, has_prev_util = nullable(cols["prev_util"])
    f, n, flag = _allocation_loop(
        starts,
        cols["ts"].dt.epoch("us").to_numpy(),
        cols["util"].cast(pl.Float64).to_numpy(),
        mem,
        has_mem,
        total,
        has_total,
        cols["idle"].to_numpy(),
        cols["covered_s"].to_numpy(),
        cols["tail_covered_s"].to_numpy(),
        cols["window_no"].to_numpy(),
        prev_util,
        has_prev_util,
        float(t.fluctuation_range_pct),
    )
    at = starts[:-1]
    observed, no_mem, dips = f[OBSERVED], ~flag[ANY_MEM], n[DIPS]
    no_time = observed == 0
    per_second = np.where(no_time, 1.0, observed)
    mean_gap = f[GAP_SUM] / np.maximum(dips - 1, 1)
    zero = mean_gap == 0
    return pl.DataFrame(
        {
            "alloc_id": cols["alloc_id"].to_numpy()[at],
            "interval_s": cols["interval_s"].to_numpy()[at],
            "samples": np.diff(starts),
            "observed_s": observed,
            "util_mean": nulls_where(f[UTIL_S] / per_second, no_time),
            "util_max": f[UTIL_MAX],
            "mem_used_mean_mib": nulls_where(f[MEM_S] / per_second, no_time | no_mem),
            "mem_used_max_mib": nulls_where(f[MEM_MAX], no_mem),
            "mem_total_mib": nulls_where(f[TOTAL_MAX], ~flag[ANY_TOTAL]),
            "never_used": flag[NEVER_USED],
            "windows": n[WINDOWS],
            "fluctuating_windows": n[FLUCTUATING],
            "dips": dips,
            "spacing_spread": nulls_where(
                (f[GAP_MAX] - f[GAP_MIN]) / np.where(zero, 1.0, mean_gap), zero | (dips < 2)
            ),
        },
        schema=SUMS_SCHEMA,
    )


def gpu_sample_stats(allocation_sums: pl.DataFrame) -> pl.DataFrame:
    """Per allocation, its interval, samples, observed seconds, time-weighted means and highest
    readings, and never_used, from `compute`'s rows (test oracle: gpu_sample_stats.sql)."""
    return allocation_sums.select(list(STATS_SCHEMA))


def checkpoint_gpus(sums: pl.DataFrame) -> pl.DataFrame:
    """Per allocation with at least two dips, its dips and their spacing's spread (test oracle:
    job_checkpoint.sql's per_gpu)."""
    return sums.filter(pl.col("dips") >= 2).select("alloc_id", "dips", "spacing_spread")


def checkpointing(
    allocation_sums: pl.DataFrame, range_alloc: pl.DataFrame, t: Thresholds
) -> pl.DataFrame:
    """Pure: `compute`'s rows and the allocations (alloc_id, job_id) -> per job, its GPUs that
    checkpoint (test oracle: job_checkpoint.sql)."""
    gpus = checkpoint_gpus(allocation_sums).filter(
        (pl.col("dips") >= t.checkpoint_min_dips)
        & (pl.col("spacing_spread") < t.checkpoint_spacing_tolerance)
    )
    return (
        gpus.join(range_alloc.select(pl.col("alloc_id").cast(pl.Int64), "job_id"), on="alloc_id")
        .group_by("job_id")
        .agg(pl.len().cast(pl.Int64).alias("checkpointing_gpus"))
        .select(pl.col("job_id").cast(pl.String), "checkpointing_gpus")
    )


def fluctuation(allocation_sums: pl.DataFrame, range_alloc: pl.DataFrame) -> pl.DataFrame:
    """Pure: `compute`'s rows and the allocations (alloc_id, job_id) -> per job (of one host
    range), its GPU windows and those that fluctuate [CloudBrain §IV-B]. **choice**: a window
    (`fluctuation_window_s`, from the attempt's start) of one GPU fluctuates when max - min of
    its utilization exceeds `fluctuation_range_pct` points; per_job.py adds up the host ranges
    and applies the job share (`fluctuation_job_share`)."""
    return (
        allocation_sums.select("alloc_id", "windows", "fluctuating_windows")
        .join(range_alloc.select(pl.col("alloc_id").cast(pl.Int64), "job_id"), on="alloc_id")
        .group_by("job_id")
        .agg(pl.col("windows").sum(), pl.col("fluctuating_windows").sum())
        .select(list(FLUCTUATION_SCHEMA))
        .cast(FLUCTUATION_SCHEMA)  # type: ignore[arg-type]
    )


def util_buckets(sample_flags: pl.DataFrame) -> pl.DataFrame:
    """Pure: sample_flags rows (alloc_id, ts, window_no, minute, util, covered_s,
    tail_covered_s) -> per allocation and utilization bucket, the seconds of its minutes with
    data whose mean falls there (as `util_hist` says)."""
    if not sample_flags.height:
        return pl.DataFrame(schema=BUCKETS_SCHEMA)
    cols, starts = _ordered(
        sample_flags,
        [
            pl.col("util").cast(pl.Float64),
            pl.col("covered_s").cast(pl.Float64),
            pl.col("tail_covered_s").cast(pl.Float64),
            pl.col("window_no").cast(pl.Float64),
            pl.col("minute").cast(pl.Float64),
        ],
    )
    seconds = _minute_loop(
        starts,
        cols["util"].to_numpy(),
        cols["covered_s"].to_numpy(),
        cols["tail_covered_s"].to_numpy(),
        cols["window_no"].to_numpy(),
        cols["minute"].to_numpy(),
    )
    alloc, bucket = np.nonzero(seconds)
    return pl.DataFrame(
        {
            "alloc_id": cols["alloc_id"].to_numpy()[starts[:-1]][alloc],
            "bucket": bucket,
            "weight_s": seconds[alloc, bucket],
        },
        schema=BUCKETS_SCHEMA,
    )


def util_hist(util_buckets: pl.DataFrame, range_alloc: pl.DataFrame) -> pl.DataFrame:
    """Pure: `util_buckets`' rows and the allocations (alloc_id, job_id, gpu_weight) -> per job
    and per-minute utilization bucket (0..100), GPU-minutes [Philly §3, Fig. 5]. A minute is
    counted from its attempt's start; its utilization is the time-weighted mean of the GPU's
    samples in it, and its weight the seconds of data in it (a minute with no data: none),
    times the device's gpu_weight (a MIG instance's slice of its GPU, 1 for a whole GPU). The
    bucket is the mean rounded down after adding 1e-9: a minute steady at 30 % whose sums of
    sub-second weights divide to 29.999999999999996 is in bucket 30, not 29."""
    return (
        util_buckets.join(
            range_alloc.select(pl.col("alloc_id").cast(pl.Int64), "job_id", "gpu_weight"),
            on="alloc_id",
        )
        .group_by("job_id", "bucket")
        .agg((pl.col("weight_s") * pl.col("gpu_weight")).sum() / 60.0)
        .rename({"weight_s": "gpu_minutes"})
        .select(list(HIST_SCHEMA))
        .cast(HIST_SCHEMA)  # type: ignore[arg-type]
    )
