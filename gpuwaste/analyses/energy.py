"""The energy of each allocation, over the sample_flags frame: its definition.

Energy of an allocated device [docs/definitions.md#energy]: the power of each sample times the
seconds it stands for, the same time weighting as utilization (sample j stands for
(t_(j-1), t_j]; a stretch longer than `missing_gap_intervals` intervals is missing data, so gaps
are not filled: `covered_s` and `tail_covered_s` from sample_flags.py). Where the exporter gives
an energy counter (`energy_j`), a sample's energy is instead the counter's increase since the
previous sample of the allocation, a drop being a reset (the increase is then the new value,
counted from zero), as Prometheus' `increase()` counts; the first sample of an allocation, and
one after a gap, has no previous reading in the allocation and takes power x seconds.

A counter's increase (or post-reset value) is believed only when a GPU could have drawn it: at
most twice the board power limit of the device's model (`dialects.power_limit_w`, as ingest
bounds power) x the seconds it covers, or the dialect's declared maximum (`MAX_W`) where the
model is unknown. Ingest checks each reading against the one before it in the same file or query
window only, so a counter that ran backwards across two windows, or jumped forward, reaches
here: such an increase is set aside (counted per allocation in `counter_set_aside`, and in the
run's summary line) and the sample takes power x seconds instead, or nothing without power.

Energy lost: the energy of the samples inside the allocation's idle slots (idle_slots.py) and
the whole energy of a never-used device. Both are None (null) where the device has no power
reading at all: no series is not 0 J. Held-idle energy (#44): the energy of the samples inside
the allocation's held-idle stretches (idle_slots.held_stretches: utilization 0, memory held),
beside the lost energy, not in it.

The sums are per device as the exporter reports it: on a MIG instance the exporter repeats its
parent GPU's power, so job_gpu_usage.sql weighs them by the instance's slice (`gpu_weight`) and
a split GPU adds up to the energy of the whole one.
"""

from __future__ import annotations

import polars as pl

from gpuwaste.analyses.idle_slots import ALLOC_COLUMNS
from gpuwaste.analyses.job_samples import reading
from gpuwaste.dialects import MAX_W, power_limit_w

SCHEMA: dict[str, pl.DataType] = {
    "alloc_id": pl.Int64(),
    "energy_j": pl.Float64(),
    "lost_energy_j": pl.Float64(),
    "power_s": pl.Float64(),  # the seconds with a power (or counter) reading
    "held_energy_j": pl.Float64(),  # in held-idle stretches (#44); not part of lost_energy_j
    "counter_set_aside": pl.UInt32(),  # counter increases no GPU could draw: not summed
}
# The column of `range_alloc` that names the device's model, for its power limit.
MODEL = "device_model"


def limit_w(range_alloc: pl.DataFrame) -> pl.DataFrame:
    """Per allocation (alloc_id) of `range_alloc`, the most power its device can draw: twice its
    model's board power limit (`power_limit_w`, the bound ingest puts on power), else `MAX_W`."""
    ids = range_alloc.select(pl.col("alloc_id").cast(pl.Int64))
    if MODEL not in range_alloc.columns:
        return ids.with_columns(pl.lit(MAX_W).alias("limit_w"))
    models = range_alloc[MODEL].drop_nulls().unique().to_list()
    limits = {m: 2 * w for m in models if (w := power_limit_w(m)) is not None}
    limit = pl.col(MODEL).replace_strict(limits, default=MAX_W, return_dtype=pl.Float64)
    return ids.with_columns(range_alloc.select(limit.alias("limit_w")))


def sample_energy(flags: pl.DataFrame) -> tuple[pl.Expr, pl.Expr]:
    """Per sample of `flags` (sample_flags rows, in allocation and time order, with power_w,
    `limit_w` and, if the dialect has one, energy_j): the joules it stands for (null: no
    reading), and whether its counter increase was set aside as more than the device can draw."""
    seconds = pl.col("covered_s") + pl.col("tail_covered_s")
    by_power = pl.col("power_w") * seconds
    if "energy_j" not in flags.columns:
        return by_power, pl.lit(False)
    counter = pl.col("energy_j")
    # the previous row's reading: the same allocation's wherever it is used (not `is_first`)
    before = counter.shift(1)
    # a previous reading of the same allocation with no gap between: its increase, a drop a
    # reset (count from the new value); else (first sample, after a gap) power x seconds
    increase = pl.when(counter >= before).then(counter - before).otherwise(counter)
    usable = counter.is_not_null() & before.is_not_null() & ~pl.col("is_first")
    usable = usable & ~pl.col("gap_before")
    # believed only if the device could draw it in the seconds since the previous reading (no
    # gap between, so `covered_s`): else a counter that ran backwards or jumped, set aside
    implausible = usable & (increase > pl.col("limit_w") * pl.col("covered_s"))
    # the last sample's tail (end of allocation after it) is power x tail seconds
    tail = pl.col("power_w") * pl.col("tail_covered_s")
    joules = pl.when(usable & ~implausible).then(increase + tail.fill_null(0.0)).otherwise(by_power)
    return joules, implausible


def compute(
    sample_flags: pl.DataFrame,
    gpu_sample_stats: pl.DataFrame,
    batch_idle_slots: pl.DataFrame,
    range_alloc: pl.DataFrame,
    batch_held_idle: pl.DataFrame,
) -> pl.DataFrame:
    """Pure: sample_flags rows (alloc_id, ts, idle, held, covered_s, tail_covered_s, is_first,
    gap_before, and power_w and energy_j where read), gpu_sample_stats (alloc_id, never_used),
    the range's idle slots and allocations (with their `device_model` where known), its held-idle
    stretches -> per allocation with a reading, its joules, the joules lost, those in held-idle
    stretches and the counter increases set aside (`SCHEMA`)."""
    # a counter with no reading (most dialects' files: the column, all null, or not read at
    # all) is no counter; no power read is power null throughout (`reading`)
    counted = "energy_j" in sample_flags.columns and (
        sample_flags["energy_j"].null_count() < sample_flags.height
    )
    if not sample_flags.height or ("power_w" not in sample_flags.columns and not counted):
        return pl.DataFrame(schema=SCHEMA)
    cols = ["alloc_id", "ts", "idle", "covered_s", "tail_covered_s", "is_first"]
    cols += ["held"] if "held" in sample_flags.columns else []
    cols += ["gap_before"] + (["energy_j"] if counted else [])
    flags = sample_flags.select(*cols, reading(sample_flags, "power_w")).with_columns(
        pl.col("alloc_id").cast(pl.Int64)
    )
    if "energy_j" in flags.columns:
        flags = flags.join(limit_w(range_alloc), on="alloc_id", how="left", maintain_order="left")
    read = pl.col("power_w").is_not_null()
    if "energy_j" in flags.columns:
        read = read | pl.col("energy_j").is_not_null()
    j, set_aside = sample_energy(flags)
    joules = flags.with_columns(j.alias("j"), set_aside.alias("set_aside")).filter(read)
    if not joules.height:
        return pl.DataFrame(schema=SCHEMA)
    slots = batch_idle_slots.join(
        range_alloc.select(pl.col("alloc_id").cast(pl.Int64), *ALLOC_COLUMNS),
        on=list(ALLOC_COLUMNS),
        nulls_equal=True,
    ).select("alloc_id", pl.col("start_ts").alias("slot_start"), pl.col("end_ts").alias("slot_end"))
    in_slots = _in_stretches(joules.filter(pl.col("idle")), slots, "slot_j")
    held = batch_held_idle.select(
        pl.col("alloc_id").cast(pl.Int64),
        pl.col("start_ts").alias("slot_start"),
        pl.col("end_ts").alias("slot_end"),
    )
    held_samples = joules.filter(pl.col("held")) if "held" in joules.columns else joules.clear()
    in_held = _in_stretches(held_samples, held, "held_energy_j")
    never = gpu_sample_stats.select(pl.col("alloc_id").cast(pl.Int64), "never_used")
    per_alloc = (
        joules.group_by("alloc_id")
        .agg(
            # null, not 0, where no sample stands for any joules (its increases set aside and
            # no power to fall back on)
            pl.when(pl.col("j").count() > 0).then(pl.col("j").sum()).alias("energy_j"),
            (pl.col("covered_s") + pl.col("tail_covered_s"))
            .filter(pl.col("j").is_not_null())
            .sum()
            .alias("power_s"),
            pl.col("set_aside").sum().alias("counter_set_aside"),
        )
        .join(in_slots, on="alloc_id", how="left")
        .join(in_held, on="alloc_id", how="left")
        .join(never, on="alloc_id", how="left")
    )
    lost = (
        pl.when(pl.col("never_used").fill_null(False))
        .then(pl.col("energy_j"))
        .otherwise(pl.col("slot_j").fill_null(0.0))
    )
    held_j = pl.col("held_energy_j").fill_null(0.0).alias("held_energy_j")
    out = per_alloc.select(
        "alloc_id",
        "energy_j",
        lost.alias("lost_energy_j"),
        "power_s",
        held_j,
        "counter_set_aside",
    )
    return out.cast(SCHEMA)  # type: ignore[arg-type]


def _in_stretches(samples: pl.DataFrame, stretches: pl.DataFrame, name: str) -> pl.DataFrame:
    """Per allocation, the joules `j` of `samples` (alloc_id, ts, j; in time order within each
    allocation, as sample_flags gives them, which is all the as-of join by allocation needs)
    inside `stretches` (alloc_id, slot_start, slot_end), as column `name`: a sample is in the
    stretch that starts at or before it and ends at or after it."""
    return (
        samples.select("alloc_id", "ts", "j")
        .join_asof(
            stretches.sort("alloc_id", "slot_start"),
            left_on="ts",
            right_on="slot_start",
            by="alloc_id",
            strategy="backward",
            check_sortedness=False,
        )
        .filter(pl.col("ts") <= pl.col("slot_end"))
        .group_by("alloc_id")
        .agg(pl.col("j").sum().alias(name))
    )
