"""Each allocation's samples summed per minute (`sql/staging/util_minutes.sql`), over the
sample_flags frame, in one linear pass.

The SQL file is the definition an operator reads: per allocation x fluctuation window x minute
since the attempt's start, the time-weighted utilization sum, the seconds of data, and the
lowest and highest utilization (job_util_hist.sql and job_fluctuation.sql read them). DuckDB
computes it with a hash aggregation on both cores. Each allocation's rows come contiguous and in
time order (`alloc_rows.by_allocation`), so the rows of one (allocation, window, minute) are
contiguous too, and numpy's `reduceat` sums them where they start, on one core
(bench/RESULTS.md). tests/test_job_samples.py checks that both give the same rows.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from gpuwaste.analyses.alloc_rows import WEIGHT_S, by_allocation

SCHEMA: dict[str, pl.DataType] = {
    "alloc_id": pl.Int64(),
    "window_no": pl.Float64(),
    "minute": pl.Float64(),
    "util_weighted": pl.Float64(),
    "weight_s": pl.Float64(),
    "util_min": pl.Float64(),
    "util_max": pl.Float64(),
}


def compute(flags: pl.DataFrame) -> pl.DataFrame:
    """Pure: sample_flags rows (alloc_id, ts, window_no, minute, util, covered_s,
    tail_covered_s; util never null) -> the rows of util_minutes.sql, in the order of `flags`
    when each allocation's rows are contiguous and in time order, else in (alloc_id, ts) order."""
    if not flags.height:
        return pl.DataFrame(schema=SCHEMA)
    cols = flags.select(
        pl.col("alloc_id").cast(pl.Int64),
        "ts",
        pl.col("window_no").cast(pl.Float64),
        pl.col("minute").cast(pl.Float64),
        pl.col("util").cast(pl.Float64),
        WEIGHT_S,
    )
    cols, new = by_allocation(cols)
    alloc = cols["alloc_id"].to_numpy()
    window, minute = cols["window_no"].to_numpy(), cols["minute"].to_numpy()
    new[1:] |= (window[1:] != window[:-1]) | (minute[1:] != minute[:-1])
    at = np.flatnonzero(new)
    util, weight = cols["util"].to_numpy(), cols["weight_s"].to_numpy()
    return pl.DataFrame(
        {
            "alloc_id": alloc[at],
            "window_no": window[at],
            "minute": minute[at],
            "util_weighted": np.add.reduceat(util * weight, at),
            "weight_s": np.add.reduceat(weight, at),
            "util_min": np.minimum.reduceat(util, at),
            "util_max": np.maximum.reduceat(util, at),
        },
        schema=SCHEMA,
    )
