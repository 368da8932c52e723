"""Synchronous checkpointing per job (`sql/staging/job_checkpoint.sql`), over the job_samples
frame, in one linear pass.

The SQL file is the definition an operator reads [ICSE24 Table 1]: a dip is a sample with
utilization 0 right after one above 0, before the allocation's last busy sample; a GPU
checkpoints when it has at least `checkpoint_min_dips` dips whose spacing varies by under
`checkpoint_spacing_tolerance` of its mean. DuckDB scans the samples twice for it (the last busy
sample, then the dips) and sorts the dips. The per-sample pass (job_samples.py) leaves each
allocation's samples contiguous and in time order (`alloc_rows.by_allocation`), so numpy finds
the dips and their spacing in one pass and `reduceat` sums them, on one core, beside the SQL steps
(bench/RESULTS.md). tests/test_job_samples.py checks that both give the same rows, per GPU and
per job.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from gpuwaste.analyses.alloc_rows import by_allocation, nulls_where, opens
from gpuwaste.config import Thresholds

GPU_SCHEMA: dict[str, pl.DataType] = {
    "alloc_id": pl.Int64(),
    "dips": pl.Int64(),
    "spacing_spread": pl.Float64(),
}
SCHEMA: dict[str, pl.DataType] = {"job_id": pl.String(), "checkpointing_gpus": pl.Int64()}


def per_gpu(samples: pl.DataFrame) -> pl.DataFrame:
    """Pure: job_samples rows (alloc_id, ts, util, prev_util; util never null) -> the rows of
    the SQL's `per_gpu`: per allocation with at least two dips, their number and the spread of
    their spacing ((max - min) / mean, null when the mean is 0)."""
    cols = samples.select(
        pl.col("alloc_id").cast(pl.Int64),
        pl.col("ts").dt.epoch("us"),
        pl.col("util").cast(pl.Float64),
        (pl.col("prev_util").cast(pl.Float64) > 0).fill_null(False).alias("after_busy"),
    )
    if not cols.height:
        return pl.DataFrame(schema=GPU_SCHEMA)
    cols, first = by_allocation(cols)
    alloc, ts = cols["alloc_id"].to_numpy(), cols["ts"].to_numpy()
    util, after_busy = cols["util"].to_numpy(), cols["after_busy"].to_numpy()
    starts = np.flatnonzero(first)
    # each row's allocation's last busy sample (none: the lowest int64, so no row is before it)
    busy_ts = np.where(util > 0, ts, np.iinfo(np.int64).min)
    last_busy = np.repeat(np.maximum.reduceat(busy_ts, starts), np.diff(starts, append=len(ts)))
    dips = np.flatnonzero((util == 0) & after_busy & (ts < last_busy))
    dip_alloc, dip_ts = alloc[dips], ts[dips]
    pair = dip_alloc[1:] == dip_alloc[:-1]  # a dip and the one before it, in one allocation
    gap_alloc = dip_alloc[1:][pair]
    gaps = (dip_ts[1:] - dip_ts[:-1])[pair] / 1e6
    if not len(gaps):
        return pl.DataFrame(schema=GPU_SCHEMA)
    at = np.flatnonzero(opens(gap_alloc))
    count = np.diff(at, append=len(gaps))
    mean = np.add.reduceat(gaps, at) / count
    spread = np.maximum.reduceat(gaps, at) - np.minimum.reduceat(gaps, at)
    zero = mean == 0
    return pl.DataFrame(
        {
            "alloc_id": gap_alloc[at],
            "dips": count + 1,
            "spacing_spread": nulls_where(spread / np.where(zero, 1.0, mean), zero),
        },
        schema=GPU_SCHEMA,
    )


def compute(samples: pl.DataFrame, alloc: pl.DataFrame, t: Thresholds) -> pl.DataFrame:
    """Pure: job_samples rows and the allocations (alloc_id, job_id) -> the rows of
    job_checkpoint.sql: per job, its GPUs that checkpoint."""
    gpus = per_gpu(samples).filter(
        (pl.col("dips") >= t.checkpoint_min_dips)
        & (pl.col("spacing_spread") < t.checkpoint_spacing_tolerance)
    )
    return (
        gpus.join(alloc.select(pl.col("alloc_id").cast(pl.Int64), "job_id"), on="alloc_id")
        .group_by("job_id")
        .agg(pl.len().cast(pl.Int64).alias("checkpointing_gpus"))
        .select(pl.col("job_id").cast(pl.String), "checkpointing_gpus")
    )
