"""Memory phases and stable phases [CloudBrain §IV-B, Table III].

Definition (docs/definitions.md#memory-phases, #stable-phases): GPU memory use of a job is piecewise steady. A
*phase* is a maximal run of samples over which memory used stays within a tolerance of the phase's
level; **choice**: a new phase starts where memory used moves more than `phase_tolerance_mib`
(512 MiB) away from the running level of the current phase. The running level is the
time-weighted mean of the phase's readings so far. A stretch of missing data also ends a phase
(nothing is known across it). A *stable phase* is one longer than t whose idle memory
(capacity - the highest memory used in the phase) is larger than m; the `stable` column uses the
smallest t and m of `stable_phase_lengths_s` / `stable_phase_idle_gib`, and
`stable_phase_grid` has every (t, m).

Grain: one row per phase of a job x attempt x GPU. Units: seconds, MiB.

`level_runs_frame` cuts the readings into runs where a reading steps by
more than tolerance / 8 from the previous one (an ASOF join to the run openings), and the merge
of runs into phases, which is sequential (each boundary depends on the running level), runs here
over those runs, which are few where memory is steady. A run opens a new phase when any of its
readings is more than the tolerance away from the running level, so the result equals the
per-reading rule except for memory that creeps in steps under tolerance / 8 (then the phase
breaks at the first run edge past the tolerance instead of at the exact reading).

Both are compiled loops (numba, no GIL), faster than the polars group-by and the Python loop
they replace (docs/history/bench-analyze.md, "Compiled loops per allocation"): the runs over the
samples in allocation and time order (`level_runs_frame`) and the merge over the runs
(`_phase_numbers`).
"""

from __future__ import annotations

import numba
import numpy as np
import polars as pl

from gpuwaste.analyses.alloc_rows import by_allocation, nullable
from gpuwaste.config import Thresholds
from gpuwaste.warehouse.results import STABLE_PHASES

GPU_KEY = ["job_id", "attempt", "host", "gpu", "gpu_instance"]
STEP_FRACTION = 8  # readings closer than tolerance / 8 to the previous one stay in its run


@numba.njit(cache=True, nogil=True)
def _micros(seconds: float) -> int:
    """`seconds` as whole microseconds, half away from zero (as the SQL rounds a duration)."""
    us = seconds * 1e6
    whole = np.trunc(us)
    if abs(us - whole) >= 0.5:
        whole += np.sign(us)
    return int(whole)


@numba.njit(cache=True, nogil=True)
def _run_loop(
    ts: np.ndarray,
    mem: np.ndarray,
    has_mem: np.ndarray,
    prev_mem: np.ndarray,
    has_prev: np.ndarray,
    total: np.ndarray,
    has_total: np.ndarray,
    gap_before: np.ndarray,
    covered: np.ndarray,
    tail_covered: np.ndarray,
    step: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Over samples in allocation and time order, those with a memory reading: the row where
    each run opens, its first and last microsecond (opens_at min, closes_at max), and its floats
    (seconds, memory times seconds, mean, lowest, highest, highest capacity (NaN: none)), each a
    row of one array."""
    n = len(ts)
    opens = np.empty(n, np.int64)
    k = 0
    for i in range(n):
        if has_mem[i] and (not has_prev[i] or gap_before[i] or abs(mem[i] - prev_mem[i]) > step):
            opens[k] = i
            k += 1
    span = np.empty((2, k), np.int64)
    f = np.empty((6, k))
    for r in range(k):
        hi = opens[r + 1] if r + 1 < k else n
        first, last = np.iinfo(np.int64).max, np.iinfo(np.int64).min
        weight, mem_x_s, mem_sum, count = 0.0, 0.0, 0.0, 0
        least, most, capacity = np.inf, -np.inf, np.nan
        for i in range(opens[r], hi):
            if not has_mem[i]:
                continue
            first = min(first, ts[i] - _micros(covered[i]))
            last = max(last, ts[i] + _micros(tail_covered[i]))
            w = covered[i] + tail_covered[i]
            weight += w
            mem_x_s += mem[i] * w
            mem_sum += mem[i]
            count += 1
            least, most = min(least, mem[i]), max(most, mem[i])
            if has_total[i] and not total[i] <= capacity:  # the first capacity, or a higher one
                capacity = total[i]
        span[0, r], span[1, r] = first, last
        f[0, r], f[1, r], f[2, r] = weight, mem_x_s, mem_sum / count
        f[3, r], f[4, r], f[5, r] = least, most, capacity
    return opens[:k], span, f


def level_runs_frame(sample_flags: pl.DataFrame, t: Thresholds) -> pl.DataFrame:
    """Pure: the runs (test oracle: tests/oracles/stable_phases.sql) from sample_flags rows (in
    allocation and time order as job_samples.py makes them; sorted first when they are not). A run's
    readings are contiguous there, so one compiled loop finds where runs open and sums each: no
    join, no sort, no copy of the readings."""
    if sample_flags.height:
        sample_flags, _, _ = by_allocation(sample_flags)
    mem, has_mem = nullable(sample_flags["mem_used_mib"])
    prev_mem, has_prev = nullable(sample_flags["prev_mem"])
    total, has_total = nullable(sample_flags["mem_total_mib"])
    opens, span, f = _run_loop(
        sample_flags["ts"].dt.epoch("us").to_numpy(),
        mem,
        has_mem,
        prev_mem,
        has_prev,
        total,
        has_total,
        sample_flags["gap_before"].fill_null(False).to_numpy(),
        sample_flags["covered_s"].cast(pl.Float64).to_numpy(),
        sample_flags["tail_covered_s"].cast(pl.Float64).to_numpy(),
        t.phase_tolerance_mib / STEP_FRACTION,
    )
    runs = pl.DataFrame(
        {
            "alloc_id": sample_flags["alloc_id"].cast(pl.Int64).to_numpy()[opens],
            "start_ts": span[0],
            "end_ts": span[1],
            "gap_before": sample_flags["gap_before"].to_numpy()[opens],
            "weight_s": f[0],
            "mem_x_s": f[1],
            "mem_mean": f[2],
            "mem_min": f[3],
            "mem_max": f[4],
            "mem_total_mib": pl.Series(f[5], nan_to_null=True),
        },
        schema_overrides={"alloc_id": pl.Int64, "gap_before": pl.Boolean},
    ).with_columns(pl.col("start_ts", "end_ts").cast(pl.Datetime("us", "UTC")))
    return runs.sort("alloc_id", maintain_order=True)


@numba.njit(cache=True, nogil=True)
def _phase_numbers(
    new_alloc: np.ndarray,
    gap: np.ndarray,
    weight: np.ndarray,
    mem_x_s: np.ndarray,
    mem_mean: np.ndarray,
    mem_min: np.ndarray,
    mem_max: np.ndarray,
    tol: float,
) -> np.ndarray:
    """Sequential merge of runs into phases: a run opens a new phase when any of its readings is
    more than `tol` from the running (time-weighted) level of the current phase."""
    out = np.empty(len(weight), dtype=np.int64)
    phase = -1
    level_x_s = 0.0
    level_w = 0.0
    level = 0.0
    for i in range(len(weight)):
        if new_alloc[i] or gap[i] or abs(mem_min[i] - level) > tol or abs(mem_max[i] - level) > tol:
            phase += 1
            level_x_s, level_w = 0.0, 0.0
            level = float(mem_mean[i])
        w = float(weight[i])
        if w > 0:
            level_x_s += float(mem_x_s[i])
            level_w += w
            level = level_x_s / level_w
        out[i] = phase
    return out


def merge_phases(
    level_runs: pl.DataFrame, range_alloc: pl.DataFrame, t: Thresholds
) -> pl.DataFrame:
    """Pure: the runs (`level_runs_frame`) and the allocations (alloc_id -> GPU key) -> phases with the
    columns of `stable_phases`."""
    columns = {k: v for k, v in STABLE_PHASES.columns.items() if k != "cluster"}
    if level_runs.height == 0:
        return pl.DataFrame(schema=columns)
    alloc_ids = level_runs["alloc_id"].to_numpy()
    new_alloc = np.ones(len(alloc_ids), dtype=bool)
    new_alloc[1:] = alloc_ids[1:] != alloc_ids[:-1]
    phase = _phase_numbers(
        new_alloc,
        level_runs["gap_before"].fill_null(False).to_numpy(),
        level_runs["weight_s"].to_numpy(),
        level_runs["mem_x_s"].to_numpy(),
        level_runs["mem_mean"].to_numpy(),
        level_runs["mem_min"].to_numpy(),
        level_runs["mem_max"].to_numpy(),
        t.phase_tolerance_mib,
    )
    t_min = min(t.stable_phase_lengths_s)
    m_min = min(t.stable_phase_idle_gib) * 1024.0
    phases = (
        level_runs.with_columns(pl.Series("phase", phase).set_sorted())  # numbered in order
        .group_by("phase", maintain_order=True)
        .agg(
            pl.col("alloc_id").first(),
            pl.col("start_ts").first(),
            pl.col("end_ts").last(),
            pl.col("weight_s").sum().alias("duration_s"),
            pl.when(pl.col("weight_s").sum() > 0)
            .then(pl.col("mem_x_s").sum() / pl.col("weight_s").sum())
            .otherwise(pl.col("mem_mean").mean())
            .alias("mem_level_mib"),
            pl.col("mem_max").max().alias("mem_max_mib"),
            pl.col("mem_total_mib").max(),
        )
        .with_columns((pl.col("mem_total_mib") - pl.col("mem_max_mib")).alias("idle_mem_mib"))
        .with_columns(
            ((pl.col("duration_s") > t_min) & (pl.col("idle_mem_mib") > m_min))
            .fill_null(False)
            .alias("stable")
        )
        .join(range_alloc.select("alloc_id", *GPU_KEY, "mig_profile"), on="alloc_id", how="left")
    )
    return phases.select(list(columns))


def phase_counts(batch_phases: pl.DataFrame) -> pl.DataFrame:
    """Per job x attempt x GPU (of one host range): number of phases and of stable phases."""
    return batch_phases.group_by(GPU_KEY).agg(
        pl.len().cast(pl.Int64).alias("n_phases"),
        pl.col("stable").sum().cast(pl.Int64).alias("n_stable_phases"),
    )
