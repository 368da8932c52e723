"""Each job's fluctuating GPU windows (`sql/staging/job_fluctuation.sql`), over the util_minutes
frame, in one linear pass.

The SQL file is the definition an operator reads [CloudBrain §IV-B]: a window of one GPU
(`fluctuation_window_s` from the attempt's start) fluctuates when the range of its utilization
exceeds `fluctuation_range_pct` points; per job, its GPU windows and how many fluctuate (per_job.py
adds up the host ranges and applies the job share). DuckDB groups the minutes by hashing them
twice. util_minutes.py leaves each allocation's minutes contiguous and in time order, so the
minutes of one window are contiguous too (`alloc_rows.by_allocation`), and numpy's `reduceat`
takes each window's range where it starts, on one core. tests/test_job_samples.py checks that
both give the same rows.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from gpuwaste.analyses.alloc_rows import by_allocation, opens
from gpuwaste.config import Thresholds

SCHEMA: dict[str, pl.DataType] = {
    "job_id": pl.String(),
    "windows": pl.Int64(),
    "fluctuating_windows": pl.Int64(),
}


def compute(minutes: pl.DataFrame, alloc: pl.DataFrame, t: Thresholds) -> pl.DataFrame:
    """Pure: util_minutes rows (alloc_id, window_no, util_min, util_max) and the allocations
    (alloc_id, job_id) -> the rows of job_fluctuation.sql: per job, its GPU windows and those
    whose utilization ranges over more than `fluctuation_range_pct` points."""
    if not minutes.height:
        return pl.DataFrame(schema=SCHEMA)
    cols = minutes.select(
        pl.col("alloc_id").cast(pl.Int64),
        pl.col("window_no").cast(pl.Float64),
        pl.col("util_min").cast(pl.Float64),
        pl.col("util_max").cast(pl.Float64),
    )
    cols, new = by_allocation(cols, time="window_no")
    window = cols["window_no"].to_numpy()
    new[1:] |= window[1:] != window[:-1]
    at = np.flatnonzero(new)  # where each window of each allocation opens
    spread = np.maximum.reduceat(cols["util_max"].to_numpy(), at) - np.minimum.reduceat(
        cols["util_min"].to_numpy(), at
    )
    window_alloc = cols["alloc_id"].to_numpy()[at]
    gpu = np.flatnonzero(opens(window_alloc))  # where each allocation's windows open
    per_gpu = pl.DataFrame(
        {
            "alloc_id": window_alloc[gpu],
            "windows": np.diff(gpu, append=len(at)),
            "fluctuating_windows": np.add.reduceat(
                (spread > t.fluctuation_range_pct).astype(np.int64), gpu
            ),
        },
        schema={"alloc_id": pl.Int64(), "windows": pl.Int64(), "fluctuating_windows": pl.Int64()},
    )
    return (
        per_gpu.join(alloc.select(pl.col("alloc_id").cast(pl.Int64), "job_id"), on="alloc_id")
        .group_by("job_id")
        .agg(pl.col("windows").sum(), pl.col("fluctuating_windows").sum())
        .select(list(SCHEMA))
        .cast(SCHEMA)  # type: ignore[arg-type]
    )
