"""Each allocation's time-weighted statistics (`sql/staging/gpu_sample_stats.sql`), over the
sample_flags frame, in one linear pass.

The SQL file is the definition an operator reads [ICSE24 §3.2, CloudBrain §IV-C]: per
allocation, its samples, the seconds of data they stand for, the time-weighted mean and the
highest utilization and memory, the GPU's memory and whether every sample was idle (never
used). DuckDB computes it with a hash aggregation on both cores; each allocation's rows come
contiguous (`alloc_rows.by_allocation`), so numpy's `reduceat` sums them where they start, on
one core, beside the SQL steps (bench/RESULTS.md). tests/test_job_samples.py checks that both
give the same rows.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from gpuwaste.analyses.alloc_rows import WEIGHT_S, by_allocation, nulls_where

SCHEMA: dict[str, pl.DataType] = {
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


def compute(flags: pl.DataFrame) -> pl.DataFrame:
    """Pure: sample_flags rows (alloc_id, ts, interval_s, util, mem_used_mib, mem_total_mib,
    idle, covered_s, tail_covered_s; util and idle never null) -> the rows of
    gpu_sample_stats.sql (null as in SQL: a mean over no seconds, a highest of no readings)."""
    if not flags.height:
        return pl.DataFrame(schema=SCHEMA)
    cols = flags.select(
        pl.col("alloc_id").cast(pl.Int64),
        "ts",
        pl.col("interval_s").cast(pl.Float64),
        pl.col("util").cast(pl.Float64),
        pl.col("mem_used_mib").cast(pl.Float64).fill_null(0.0).alias("mem"),
        pl.col("mem_used_mib").is_not_null().alias("has_mem"),
        pl.col("mem_total_mib").cast(pl.Float64).fill_null(-np.inf).alias("total"),
        pl.col("mem_total_mib").is_not_null().alias("has_total"),
        "idle",
        WEIGHT_S,
    )
    cols, opens = by_allocation(cols)
    at = np.flatnonzero(opens)
    weight, util = cols["weight_s"].to_numpy(), cols["util"].to_numpy()
    mem, has_mem = cols["mem"].to_numpy(), cols["has_mem"].to_numpy()
    has_total = np.logical_or.reduceat(cols["has_total"].to_numpy(), at)
    any_mem = np.logical_or.reduceat(has_mem, at)
    observed = np.add.reduceat(weight, at)
    no_time = observed == 0
    per_second = np.where(no_time, 1.0, observed)
    return pl.DataFrame(
        {
            "alloc_id": cols["alloc_id"].to_numpy()[at],
            "interval_s": cols["interval_s"].to_numpy()[at],
            "samples": np.diff(at, append=cols.height),
            "observed_s": observed,
            "util_mean": nulls_where(np.add.reduceat(util * weight, at) / per_second, no_time),
            "util_max": np.maximum.reduceat(util, at),
            "mem_used_mean_mib": nulls_where(
                np.add.reduceat(mem * weight, at) / per_second, no_time | ~any_mem
            ),
            "mem_used_max_mib": nulls_where(
                np.maximum.reduceat(np.where(has_mem, mem, -np.inf), at), ~any_mem
            ),
            "mem_total_mib": nulls_where(
                np.maximum.reduceat(cols["total"].to_numpy(), at), ~has_total
            ),
            "never_used": np.logical_and.reduceat(cols["idle"].to_numpy(), at),
        },
        schema=SCHEMA,
    )
