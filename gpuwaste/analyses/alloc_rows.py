"""The rows of each allocation in the per-sample frames (job_samples, sample_flags): where each
allocation's rows start, sorting them first when they are not grouped as the per-sample pass
leaves them (`by_allocation`), for the compiled loops over them (`sample_flags.py`,
`allocation_sums.py`, `stable_phases.py`) and their columns without copies (`nullable`); the
edges of the time a sample stands for, as polars expressions over sample_flags, for
`idle_slots.py`; and nulls in numpy results.
"""

from __future__ import annotations

import numba
import numpy as np
import polars as pl


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


@numba.njit(cache=True, nogil=True)
def _runs(alloc_id: np.ndarray, ts: np.ndarray) -> tuple[np.ndarray, bool]:
    """Where each run of equal `alloc_id` starts (and, last, the end of the rows), and whether
    every run is in time order."""
    n = len(alloc_id)
    count = 1
    for i in range(1, n):
        if alloc_id[i] != alloc_id[i - 1]:
            count += 1
    starts = np.empty(count + 1, np.int64)
    starts[0], starts[count] = 0, n
    k, in_order = 1, True
    for i in range(1, n):
        if alloc_id[i] != alloc_id[i - 1]:
            starts[k] = i
            k += 1
        elif ts[i] < ts[i - 1]:
            in_order = False
    return starts, in_order


def _starts(rows: pl.DataFrame) -> np.ndarray | None:
    """Where each allocation's rows of `rows` (alloc_id, ts) start (and, last, the end of the
    rows), when each allocation's rows are contiguous and in time order; None when they are
    not."""
    alloc = rows["alloc_id"].cast(pl.Int64).to_numpy()
    starts, in_order = _runs(alloc, rows["ts"].dt.epoch("us").to_numpy())
    if in_order and len(np.unique(alloc[starts[:-1]])) == len(starts) - 1:
        return np.asarray(starts)
    return None


def by_allocation(rows: pl.DataFrame) -> tuple[pl.DataFrame, np.ndarray, np.ndarray | None]:
    """`rows` (alloc_id, ts, ...; at least one row) with each allocation's rows contiguous and
    in time order: themselves when they are, as the per-sample pass leaves them, else sorted by
    alloc_id and ts; where each allocation's rows start (and, last, the end of the rows); and,
    when they were sorted, the row of `rows` each one came from (None: not sorted)."""
    starts = _starts(rows)
    if starts is not None:
        return rows, starts, None
    ordered = rows.with_row_index("_row").sort("alloc_id", "ts", maintain_order=True)
    starts = _starts(ordered)
    assert starts is not None
    return ordered.drop("_row"), starts, ordered["_row"].to_numpy()


def nullable(series: pl.Series) -> tuple[np.ndarray, np.ndarray]:
    """A numeric column as float64 values and where they are not null, for a compiled loop: the
    values are Arrow's buffer, not copied (a null's slot holds any value), and the validity is
    unpacked from its bitmap (faster than fill_null and is_not_null: docs/history/bench-analyze.md,
    "Compiled loops per allocation")."""
    arr = series.cast(pl.Float64).rechunk().to_arrow()
    validity, data = arr.buffers()[:2]
    n, offset = len(arr), arr.offset
    values = np.frombuffer(data, dtype=np.float64, count=n + offset)[offset:]
    if validity is None:
        return values, np.ones(n, np.bool_)
    bits = np.frombuffer(validity, np.uint8)
    valid = np.unpackbits(bits, count=n + offset, bitorder="little")[offset:]
    return values, valid.view(np.bool_)
