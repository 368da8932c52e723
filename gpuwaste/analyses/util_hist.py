"""Each job's GPU-minutes by per-minute utilization (`sql/analyses/job_util_hist.sql`), over the
util_minutes frame, in one linear pass.

The SQL file is the definition an operator reads [Philly §3, Fig. 5]: a minute of one GPU with
data falls in the 1-point bucket of its time-weighted mean utilization (0..100) and weighs its
seconds of data times the device's `gpu_weight`; per job and bucket, the GPU-minutes. DuckDB
hashes every minute by (job, bucket). Here numpy counts each allocation's minutes per bucket
(`bincount` over allocation x 101 buckets, one core), and only those few rows are joined to
their jobs. tests/test_job_samples.py checks that both give the same rows.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from gpuwaste.analyses.alloc_rows import by_allocation

BUCKETS = 101  # 0..100: one per utilization point
STEADY = 1e-9  # added before rounding down: a steady 30 % may divide to 29.999999999999996
SCHEMA: dict[str, pl.DataType] = {
    "job_id": pl.String(),
    "bucket": pl.Int16(),
    "gpu_minutes": pl.Float64(),
}


def compute(minutes: pl.DataFrame, alloc: pl.DataFrame) -> pl.DataFrame:
    """Pure: util_minutes rows (alloc_id, util_weighted, weight_s) and the allocations
    (alloc_id, job_id, gpu_weight) -> the rows of job_util_hist.sql, in any row order (each
    allocation's rows are put together first when they are not, as util_minutes.py leaves
    them)."""
    cols = minutes.filter(pl.col("weight_s") > 0).select(
        pl.col("alloc_id").cast(pl.Int64),
        pl.col("util_weighted").cast(pl.Float64),
        pl.col("weight_s").cast(pl.Float64),
    )
    if not cols.height:
        return pl.DataFrame(schema=SCHEMA)
    cols, new = by_allocation(cols, time=None)
    alloc_ids, weight = cols["alloc_id"].to_numpy(), cols["weight_s"].to_numpy()
    piece = np.cumsum(new) - 1  # each row's allocation, numbered in order
    mean = cols["util_weighted"].to_numpy() / weight
    bucket = np.clip(np.floor(mean + STEADY), 0, BUCKETS - 1)
    key = piece * BUCKETS + bucket.astype(np.int64)
    size = (int(piece[-1]) + 1) * BUCKETS
    present = np.flatnonzero(np.bincount(key, minlength=size))
    seconds = np.bincount(key, weights=weight, minlength=size)[present]
    starts = np.flatnonzero(new)
    per_alloc = pl.DataFrame(
        {
            "alloc_id": alloc_ids[starts][present // BUCKETS],
            "bucket": present % BUCKETS,
            "weight_s": seconds,
        },
        schema={"alloc_id": pl.Int64(), "bucket": pl.Int16(), "weight_s": pl.Float64()},
    )
    return (
        per_alloc.join(
            alloc.select(pl.col("alloc_id").cast(pl.Int64), "job_id", "gpu_weight"), on="alloc_id"
        )
        .group_by("job_id", "bucket")
        .agg((pl.col("weight_s") * pl.col("gpu_weight")).sum() / 60.0)
        .rename({"weight_s": "gpu_minutes"})
        .select(list(SCHEMA))
        .cast(SCHEMA)  # type: ignore[arg-type]
    )
