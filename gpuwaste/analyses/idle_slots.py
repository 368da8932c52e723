"""The idle slots of each allocation, over the sample_flags frame.

The definition [CloudBrain §IV-C]: a run of idle samples with
no missing data inside (sample_flags marks where runs open and close), from the time its first
sample stands for to the end of its last one, lasting strictly longer than `idle_slot_min_s`,
on a GPU that was used at some time. Only the samples that open or close an idle run matter, a
few in a hundred: polars picks them out on both cores, and pairs each opening with its closing
over those rows alone, where DuckDB scanned the whole frame through Arrow.
Each slot's time is split into **held** (its idle samples with memory used above 0 MiB: memory
held, no kernel running) and **empty** (no memory held), held_s + empty_s = duration_s
(docs/definitions.md "Idle held versus empty"). Idle samples have memory at or under
`idle_mem_floor_mib`, so with the default floor (0 MiB) every slot is empty; a raised floor lets
memory-holding GPUs with no kernel into the slots, and held_s says how much of them they are.
tests/test_job_samples.py checks the rows against its test oracle, tests/oracles/idle_slots.sql.
"""

from __future__ import annotations

import polars as pl

from gpuwaste.analyses.alloc_rows import CLOSES_AT, OPENS_AT
from gpuwaste.config import Thresholds

ALLOC_COLUMNS = ("job_id", "attempt", "host", "gpu", "gpu_instance", "mig_profile")


def compute(
    sample_flags: pl.DataFrame,
    gpu_sample_stats: pl.DataFrame,
    range_alloc: pl.DataFrame,
    t: Thresholds,
) -> pl.DataFrame:
    """Pure: sample_flags rows (alloc_id, ts, idle, run_start, run_end, covered_s,
    tail_covered_s), gpu_sample_stats rows (alloc_id, never_used) and the allocations ->
    the idle slots (the rows of test oracle idle_slots.sql)."""
    boundaries = (
        sample_flags.lazy()
        .filter(pl.col("idle") & (pl.col("run_start") | pl.col("run_end")))
        .select(
            pl.col("alloc_id").cast(pl.Int64),
            "ts",
            "run_start",
            "run_end",
            OPENS_AT,
            CLOSES_AT,
        )
        .sort("alloc_id", "ts", "run_end")
    )
    never_used = (
        gpu_sample_stats.lazy()
        .filter(pl.col("never_used"))
        .select(pl.col("alloc_id").cast(pl.Int64))
    )
    runs = (
        boundaries.with_columns(
            pl.col("closes_at").shift(-1).over("alloc_id").alias("next_closes_at")
        )
        .filter(pl.col("run_start"))
        .select(
            "alloc_id",
            pl.col("opens_at").alias("start_ts"),
            pl.when(pl.col("run_end"))
            .then(pl.col("closes_at"))
            .otherwise(pl.col("next_closes_at"))
            .alias("end_ts"),
        )
        .filter(pl.col("end_ts").is_not_null())  # as the SQL: no closing, no duration, no slot
        .join(never_used, on="alloc_id", how="anti")
    )
    slots = (
        runs.join(_held(sample_flags, runs), on=["alloc_id", "start_ts"], how="left")
        .join(
            range_alloc.lazy().select(pl.col("alloc_id").cast(pl.Int64), *ALLOC_COLUMNS),
            on="alloc_id",
        )
        .select(*ALLOC_COLUMNS, "start_ts", "end_ts", "held_s")
        .collect()
    )
    # seconds as DuckDB's epoch() gives them: polars divides a column by a constant as a
    # multiplication by its inverse, one bit off for 3 in 10 sub-second durations; numpy divides
    micros = (slots["end_ts"] - slots["start_ts"]).dt.total_microseconds().to_numpy()
    slots = slots.with_columns(pl.Series("duration_s", micros / 1e6, dtype=pl.Float64))
    held = pl.min_horizontal(pl.col("held_s").fill_null(0.0), pl.col("duration_s"))
    return (
        slots.filter(pl.col("duration_s") > float(t.idle_slot_min_s))
        .with_columns(held.alias("held_s"))
        .with_columns((pl.col("duration_s") - pl.col("held_s")).alias("empty_s"))
        .select(*ALLOC_COLUMNS, "start_ts", "end_ts", "duration_s", "held_s", "empty_s")
    )


def _held(sample_flags: pl.DataFrame, runs: pl.LazyFrame) -> pl.LazyFrame:
    """Per idle run (alloc_id, start_ts): the seconds its samples holding memory stand for.
    Only those samples are read (none under the default floor), each matched to the run that
    opens at or before it and closes at or after it."""
    holding = (
        sample_flags.lazy()
        .filter(pl.col("idle") & (pl.col("mem_used_mib") > 0))
        .select(
            pl.col("alloc_id").cast(pl.Int64),
            "ts",
            (pl.col("covered_s") + pl.col("tail_covered_s")).alias("held_s"),
        )
        .sort("ts")
    )
    return (
        holding.join_asof(
            runs.select("alloc_id", "start_ts", "end_ts").sort("start_ts"),
            left_on="ts",
            right_on="start_ts",
            by="alloc_id",
            strategy="backward",
            check_sortedness=False,  # both sorted by time just above; polars cannot check by group
        )
        .filter(pl.col("ts") <= pl.col("end_ts"))
        .group_by("alloc_id", "start_ts")
        .agg(pl.col("held_s").sum())
    )
