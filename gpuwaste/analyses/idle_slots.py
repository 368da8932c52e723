"""The idle slots and the held-idle stretches of each allocation, over the sample_flags frame.

The definition [CloudBrain §IV-C]: a run of idle samples with
no missing data inside (sample_flags marks where runs open and close), from the time its first
sample stands for to the end of its last one, lasting strictly longer than `idle_slot_min_s`,
on a GPU that was used at some time. Only the samples that open or close an idle run matter, a
few in a hundred: polars picks them out on both cores, and pairs each opening with its closing
over those rows alone, where DuckDB scanned the whole frame through Arrow.

**Held idle** (#44, docs/definitions.md "Idle held versus empty"): the same rule over runs of
*held* samples, utilization 0 with memory used above `idle_mem_floor_mib` (memory held, no
kernel), with the same minimum: `held_stretches`. An idle slot is **empty** idle (memory at or
under the floor), a held stretch held idle; a run of utilization 0 in which memory is taken or
released is two runs, each judged by the minimum. Held stretches are not idle slots (the
studies' figures are unchanged: that time stays busy); they are summed per device into
job_gpu_usage's `idle_held_s` and their energy, and not stored per stretch.
tests/test_job_samples.py checks the rows against its test oracle, tests/oracles/idle_slots.sql.
"""

from __future__ import annotations

import polars as pl

from gpuwaste.analyses.alloc_rows import CLOSES_AT, OPENS_AT
from gpuwaste.config import Thresholds

ALLOC_COLUMNS = ("job_id", "attempt", "host", "gpu", "gpu_instance", "mig_profile")

HELD_SCHEMA: dict[str, pl.DataType] = {
    "alloc_id": pl.Int64(),
    "start_ts": pl.Datetime("us", "UTC"),
    "end_ts": pl.Datetime("us", "UTC"),
    "duration_s": pl.Float64(),
}


def _runs(sample_flags: pl.DataFrame, flag: str) -> pl.LazyFrame:
    """(alloc_id, start_ts, end_ts) of each run of samples where column `flag` holds: its
    opening and closing samples paired, over those rows alone."""
    boundaries = (
        sample_flags.lazy()
        .filter(pl.col(flag) & (pl.col("run_start") | pl.col("run_end")))
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
    return (
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
    )


def _longer(runs: pl.DataFrame, t: Thresholds) -> pl.DataFrame:
    """`runs` with `duration_s`, those lasting strictly longer than `idle_slot_min_s`."""
    # seconds as DuckDB's epoch() gives them: polars divides a column by a constant as a
    # multiplication by its inverse, one bit off for 3 in 10 sub-second durations; numpy divides
    micros = (runs["end_ts"] - runs["start_ts"]).dt.total_microseconds().to_numpy()
    runs = runs.with_columns(pl.Series("duration_s", micros / 1e6, dtype=pl.Float64))
    return runs.filter(pl.col("duration_s") > float(t.idle_slot_min_s))


def compute(
    sample_flags: pl.DataFrame,
    gpu_sample_stats: pl.DataFrame,
    range_alloc: pl.DataFrame,
    t: Thresholds,
) -> pl.DataFrame:
    """Pure: sample_flags rows (alloc_id, ts, idle, run_start, run_end, covered_s,
    tail_covered_s), gpu_sample_stats rows (alloc_id, never_used) and the allocations ->
    the idle slots (the rows of test oracle idle_slots.sql)."""
    never_used = (
        gpu_sample_stats.lazy()
        .filter(pl.col("never_used"))
        .select(pl.col("alloc_id").cast(pl.Int64))
    )
    slots = (
        _runs(sample_flags, "idle")
        .join(never_used, on="alloc_id", how="anti")
        .join(
            range_alloc.lazy().select(pl.col("alloc_id").cast(pl.Int64), *ALLOC_COLUMNS),
            on="alloc_id",
        )
        .select(*ALLOC_COLUMNS, "start_ts", "end_ts")
        .collect()
    )
    return _longer(slots, t).select(*ALLOC_COLUMNS, "start_ts", "end_ts", "duration_s")


def held_stretches(sample_flags: pl.DataFrame, t: Thresholds) -> pl.DataFrame:
    """Pure: sample_flags rows (alloc_id, ts, held, run_start, run_end, covered_s,
    tail_covered_s) -> the held-idle stretches (`HELD_SCHEMA`): runs of utilization 0 with
    memory held, longer than `idle_slot_min_s`. A never-used GPU has none (its samples are
    all idle, none held)."""
    if "held" not in sample_flags.columns:
        return pl.DataFrame(schema=HELD_SCHEMA)
    runs = _runs(sample_flags, "held").collect()
    return _longer(runs, t).select(list(HELD_SCHEMA)).cast(HELD_SCHEMA)  # type: ignore[arg-type]
