"""The rows of each allocation in the per-sample frames (job_samples, sample_flags), for the
steps that reduce them with numpy (`util_minutes.py`, `gpu_sample_stats.py`, `checkpoint.py`)
and of each allocation in the per-minute frame (util_minutes: `fluctuation.py`,
`util_hist.py`).

The per-sample pass (job_samples.py) leaves each allocation's rows contiguous and in time
order, so a per-allocation sum is numpy's `reduceat` where each allocation starts: one linear
pass on one core, where DuckDB hashes rows that arrive already grouped. Rows in any other order
are sorted first, so the result never depends on the order.

It also holds what a sample stands for, as polars expressions over sample_flags (its seconds,
and the edges of its time), for those steps, `idle_slots.py` and `stable_phases.py`.
"""

from __future__ import annotations

import numpy as np
import polars as pl

# The seconds a sample stands for (time weighting, sample_flags.sql): since the previous sample,
# and for the last one also its tail to the allocation's end.
WEIGHT_S = (pl.col("covered_s") + pl.col("tail_covered_s")).cast(pl.Float64).alias("weight_s")


def _duration(seconds: str) -> pl.Expr:
    """A column of seconds as a duration, rounded to the microsecond as the SQL rounds."""
    us = (pl.col(seconds).cast(pl.Float64) * 1e6).round(mode="half_away_from_zero")
    return pl.duration(microseconds=us.cast(pl.Int64))


# The edges of the time a sample stands for: sample j stands for (t_(j-1), t_j], and the last
# one also for its tail to the allocation's end.
OPENS_AT = (pl.col("ts") - _duration("covered_s")).alias("opens_at")
CLOSES_AT = (pl.col("ts") + _duration("tail_covered_s")).alias("closes_at")


def in_order(alloc: np.ndarray, ts: np.ndarray | None, same: np.ndarray) -> bool:
    """Each allocation's rows contiguous and in time order (`same`: row i+1 has row i's
    allocation), as job_samples.py leaves them; contiguous only when `ts` is None."""
    firsts = alloc[np.flatnonzero(~same) + 1]
    if len(np.unique(firsts)) != len(firsts) or alloc[0] in firsts:
        return False
    return ts is None or bool(np.all((ts[1:] >= ts[:-1]) | ~same))


def opens(keys: np.ndarray) -> np.ndarray:
    """Per row of `keys` (at least one), whether it opens a run of equal keys (True at row 0)."""
    out = np.empty(len(keys), dtype=bool)
    out[0] = True
    np.not_equal(keys[1:], keys[:-1], out=out[1:])
    return out


def by_allocation(frame: pl.DataFrame, time: str | None = "ts") -> tuple[pl.DataFrame, np.ndarray]:
    """`frame` (alloc_id, `time`, ...; at least one row) with each allocation's rows contiguous
    and in order of `time` (any order when None): itself when they are, else sorted by alloc_id
    and `time`; and per row whether it opens its allocation's rows (True at row 0)."""
    alloc = frame["alloc_id"].to_numpy()
    ts = frame[time].to_numpy() if time else None
    if not in_order(alloc, ts, alloc[1:] == alloc[:-1]):
        frame = frame.sort("alloc_id", *([time] if time else []), maintain_order=True)
        alloc = frame["alloc_id"].to_numpy()
    return frame, opens(alloc)


def nulls_where(values: np.ndarray, missing: np.ndarray) -> pl.Series:
    """`values` as a Float64 series with null where `missing`."""
    series = pl.Series(values, dtype=pl.Float64)
    return series.set(pl.Series(missing), None) if missing.any() else series
