"""What a sample stands for, as polars expressions over the sample_flags frame (its seconds, and
the edges of its time), for `idle_slots.py` and `stable_phases.py`; and nulls in numpy results.
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


def nulls_where(values: np.ndarray, missing: np.ndarray) -> pl.Series:
    """`values` as a Float64 series with null where `missing`."""
    series = pl.Series(values, dtype=pl.Float64)
    return series.set(pl.Series(missing), None) if missing.any() else series
