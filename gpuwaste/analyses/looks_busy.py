"""The evidence of "looks busy" (#44, docs/definitions.md#looks-busy), per job, over the
job_samples frame of each host range: its definition. job_usage.sql decides `looks_busy` from it.

Of a job's samples that carry the coarse busy metric (`gpu_util`: DCGM GPU_UTIL, nvidia-smi's
utilization), how many read it at or above `busy_coarse_min_pct` while the GPU did almost
nothing, by one of two arms:

- fine: the fine activity (the larger of SM and tensor-pipe activity) is at or under
  `busy_fine_max_pct`;
- power, for a sample without a fine metric: its power is at or under `busy_power_max_idle_x`
  times the idle power of the device's model measured in the data (the `idle_power` analysis,
  measured once per run by busy_power.py; each allocation's, by its model, in `range_alloc`);

and their means beside. A sample with a fine metric is judged by it alone (the better evidence:
low power with real SM activity is light work, not a loop); one with neither a fine metric nor
power and an idle power for its model is no evidence: it counts in `coarse_samples` only. A MIG
instance has no power of its own (its series repeat the parent's). Samples are counted, not
weighted by time: one exporter scrapes a job's GPUs at one interval. The samples are those of
the per-job pass (job_samples.py: inside an allocation, with a utilization; every source that
gives `gpu_util` gives a utilization with it, of which it is one).

The evidence is summed per job in each host range (`evidence`) and added up over the ranges
(`per_job`), so that the samples are read once, by the pass, whatever the arms judge.
tests/oracles/job_busy_evidence.sql states it again in SQL over gpu_samples
(tests/test_looks_busy_generated.py compares the two).
"""

from __future__ import annotations

import polars as pl

from gpuwaste.analyses.job_samples import reading
from gpuwaste.config import Thresholds

# The column of `range_alloc` with the idle power of the allocation's model (W; null: none
# measured), from staging/alloc_models.sql.
IDLE_POWER = "idle_power_w"
# The readings of job_samples the arms read (job_samples.py passes them on).
READINGS = ("gpu_util", "sm_active", "tensor_active", "power_w")

_COUNTS = ("coarse_samples", "fine_samples", "hollow_samples", "power_samples", "low_power_samples")
_SUMS = ("coarse_util_sum", "fine_util_sum", "power_sum_w", "idle_power_sum_w")
# A host range's evidence: per job, the counts and the sums of the means.
RANGE_SCHEMA: dict[str, pl.DataType] = {
    "job_id": pl.String(),
    **{c: pl.Int64() for c in _COUNTS},
    **{s: pl.Float64() for s in _SUMS},
}
# The batch's evidence (relation batch_busy_evidence, which job_usage.sql reads): per job with a
# sample carrying the coarse metric, the counts and the means.
SCHEMA: dict[str, pl.DataType] = {
    "job_id": pl.String(),
    **{c: pl.Int64() for c in _COUNTS},
    "coarse_util_mean": pl.Float64(),
    "fine_util_mean": pl.Float64(),
    "power_mean_w": pl.Float64(),
    "idle_power_w": pl.Float64(),
}


def evidence(job_samples: pl.DataFrame, range_alloc: pl.DataFrame, t: Thresholds) -> pl.DataFrame:
    """Pure: job_samples rows (alloc_id, `READINGS` where read) and the range's allocations
    (alloc_id, job_id, gpu_instance, `IDLE_POWER`) -> per job, the evidence of this range
    (`RANGE_SCHEMA`)."""
    # no coarse metric read: no sample to judge (a fine metric or power not read is null)
    if not job_samples.height or "gpu_util" not in job_samples.columns:
        return pl.DataFrame(schema=RANGE_SCHEMA)
    read = {c: reading(job_samples, c) for c in READINGS}
    alloc = range_alloc.select(
        pl.col("alloc_id").cast(pl.Int64),
        "job_id",
        pl.col("gpu_instance").is_null().alias("whole_gpu"),
        pl.col(IDLE_POWER).cast(pl.Float64).alias("idle_w"),
    )
    fine, power, idle_w = pl.col("fine"), pl.col("power_w"), pl.col("idle_w")
    coarse_busy = pl.col("gpu_util") >= float(t.busy_coarse_min_pct)
    by_power = fine.is_null() & pl.col("whole_gpu") & power.is_not_null() & idle_w.is_not_null()
    low_power = by_power & coarse_busy & (power <= float(t.busy_power_max_idle_x) * idle_w)
    hollow = (coarse_busy & (fine <= float(t.busy_fine_max_pct))).fill_null(False)
    # judged per sample, then summed per job: plain columns sum faster than filters per group
    judged = (
        job_samples.lazy()
        .select(
            pl.col("alloc_id").cast(pl.Int64),
            read["gpu_util"],
            read["power_w"],
            pl.max_horizontal(read["sm_active"], read["tensor_active"]).alias("fine"),
        )
        .filter(pl.col("gpu_util").is_not_null())
        .join(alloc.lazy(), on="alloc_id", how="inner")
        .select(
            "job_id",
            "gpu_util",
            fine,
            hollow.alias("hollow"),
            by_power.alias("by_power"),
            low_power.alias("low_power"),
            pl.when(by_power).then(power).alias("judged_w"),
            pl.when(by_power).then(idle_w).alias("judged_idle_w"),
        )
    )
    out = judged.group_by("job_id").agg(
        pl.len().alias("coarse_samples"),
        fine.count().alias("fine_samples"),
        pl.col("hollow").sum().alias("hollow_samples"),
        pl.col("by_power").sum().alias("power_samples"),
        pl.col("low_power").sum().alias("low_power_samples"),
        pl.col("gpu_util").sum().alias("coarse_util_sum"),
        fine.sum().alias("fine_util_sum"),
        pl.col("judged_w").sum().alias("power_sum_w"),
        pl.col("judged_idle_w").sum().alias("idle_power_sum_w"),
    )
    return out.collect().cast(RANGE_SCHEMA)  # type: ignore[arg-type]


def per_job(ranges: pl.DataFrame) -> pl.DataFrame:
    """The evidence of every host range (`RANGE_SCHEMA` rows) added up per job, with the means
    (`SCHEMA`): GPU_UTIL's over the samples carrying it, SM/tensor activity's over those with a
    fine metric, power's and the idle power's over those the power arm judged (null: none)."""

    def mean(total: str, count: str) -> pl.Expr:
        return pl.when(pl.col(count) > 0).then(pl.col(total) / pl.col(count))

    summed = ranges.group_by("job_id").agg(pl.col(c).sum() for c in (*_COUNTS, *_SUMS))
    return summed.select(
        "job_id",
        *_COUNTS,
        mean("coarse_util_sum", "coarse_samples").alias("coarse_util_mean"),
        mean("fine_util_sum", "fine_samples").alias("fine_util_mean"),
        mean("power_sum_w", "power_samples").alias("power_mean_w"),
        mean("idle_power_sum_w", "power_samples").alias("idle_power_w"),
    ).cast(SCHEMA)  # type: ignore[arg-type]
