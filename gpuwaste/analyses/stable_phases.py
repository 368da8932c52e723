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

The SQL (`sql/analyses/stable_phases.sql`) cuts the readings into runs where a reading steps by
more than tolerance / 8 from the previous one (an ASOF join to the run openings), and the merge
of runs into phases, which is sequential (each boundary depends on the running level), runs here
over those runs, which are few where memory is steady. A run opens a new phase when any of its
readings is more than the tolerance away from the running level, so the result equals the
per-reading rule except for memory that creeps in steps under tolerance / 8 (then the phase
breaks at the first run edge past the tolerance instead of at the exact reading).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from gpuwaste.analyses.alloc_rows import CLOSES_AT, OPENS_AT, WEIGHT_S
from gpuwaste.config import Thresholds
from gpuwaste.warehouse.results import STABLE_PHASES

GPU_KEY = ["job_id", "attempt", "host", "gpu", "gpu_instance"]
STEP_FRACTION = 8  # readings closer than tolerance / 8 to the previous one stay in its run


def level_runs_frame(flags: pl.DataFrame, t: Thresholds) -> pl.DataFrame:
    """Pure: the rows of `sql/analyses/stable_phases.sql` from sample_flags rows in allocation
    and time order (as job_samples.py makes them). A run's readings are contiguous there, so a
    running count of run openings numbers them: no join, no sort, and the numbers ascend, which
    polars is told (`set_sorted`) so that it groups by slicing instead of hashing (80 -> 50 ms
    for a host range of 2.1 M samples)."""
    step = t.phase_tolerance_mib / STEP_FRACTION
    mem, prev_mem = pl.col("mem_used_mib"), pl.col("prev_mem")
    readings = (
        flags.lazy()
        .filter(mem.is_not_null())
        .select(
            "alloc_id",
            "ts",
            "mem_used_mib",
            "mem_total_mib",
            "gap_before",
            WEIGHT_S,
            OPENS_AT,
            CLOSES_AT,
            (prev_mem.is_null() | pl.col("gap_before") | ((mem - prev_mem).abs() > step))
            .fill_null(False)
            .alias("opens_run"),
        )
    )
    return (
        readings.with_columns(pl.col("opens_run").cum_sum().set_sorted().alias("run"))
        .group_by("run", maintain_order=True)
        .agg(
            pl.col("alloc_id").first(),
            pl.col("opens_at").min().alias("start_ts"),
            pl.col("closes_at").max().alias("end_ts"),
            pl.col("gap_before").first(),
            pl.col("weight_s").sum(),
            (pl.col("mem_used_mib") * pl.col("weight_s")).sum().alias("mem_x_s"),
            pl.col("mem_used_mib").mean().alias("mem_mean"),
            pl.col("mem_used_mib").min().alias("mem_min"),
            pl.col("mem_used_mib").max().alias("mem_max"),
            pl.col("mem_total_mib").max(),
        )
        .drop("run")
        .sort("alloc_id", maintain_order=True)
        .collect()
    )


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


def merge_phases(runs: pl.DataFrame, alloc: pl.DataFrame, t: Thresholds) -> pl.DataFrame:
    """Pure: runs (level_runs) and the allocations (alloc_id -> GPU key) -> phases with the
    columns of `stable_phases`."""
    columns = {k: v for k, v in STABLE_PHASES.columns.items() if k != "cluster"}
    if runs.height == 0:
        return pl.DataFrame(schema=columns)
    alloc_ids = runs["alloc_id"].to_numpy()
    new_alloc = np.ones(len(alloc_ids), dtype=bool)
    new_alloc[1:] = alloc_ids[1:] != alloc_ids[:-1]
    phase = _phase_numbers(
        new_alloc,
        runs["gap_before"].fill_null(False).to_numpy(),
        runs["weight_s"].to_numpy(),
        runs["mem_x_s"].to_numpy(),
        runs["mem_mean"].to_numpy(),
        runs["mem_min"].to_numpy(),
        runs["mem_max"].to_numpy(),
        t.phase_tolerance_mib,
    )
    t_min = min(t.stable_phase_lengths_s)
    m_min = min(t.stable_phase_idle_gib) * 1024.0
    phases = (
        runs.with_columns(pl.Series("phase", phase).set_sorted())  # numbered in order
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
        .join(alloc.select("alloc_id", *GPU_KEY, "mig_profile"), on="alloc_id", how="left")
    )
    return phases.select(list(columns))


def phase_counts(phases: pl.DataFrame) -> pl.DataFrame:
    """Per job x attempt x GPU: number of phases and of stable phases."""
    return phases.group_by(GPU_KEY).agg(
        pl.len().cast(pl.Int64).alias("n_phases"),
        pl.col("stable").sum().cast(pl.Int64).alias("n_stable_phases"),
    )
