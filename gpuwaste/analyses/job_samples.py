"""The per-sample window pass, computed in polars: its definition.

Every sample of an allocated GPU inside its allocation [start_ts, end_ts), with its neighbours
in time (lag/lead over the allocation, by ts) and the idle flag [CloudBrain §IV-C: utilization 0
and memory used at or under `idle_mem_floor_mib`]. The same rule in SQL is its test oracle
(tests/oracles/job_samples.sql; tests/test_job_samples.py compares the two on generated data and
on hypothesis cases); this module gives the rows without the two sorts the SQL costs DuckDB (the
ASOF join's and the window's):

- the sample files are stored sorted by host, GPU and time within each UTC day, so the samples
  of a batch, read in file order, are sorted by GPU with one stable sort on a small integer key
  (checked, and sorted in full if the files are not in that order);
- only the span of each host's samples that its allocations cover is read (a host held by one
  multi-host job of the batch for an hour is not read for the batch's every day);
- exclusive allocations of a GPU do not overlap, so after an as-of join (a linear merge on
  sorted input) the samples of each allocation are contiguous and in time order, and lag/lead
  are plain shifts masked at allocation edges. Allocations that share a GPU (rare) are joined
  by range and appended, sorted.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import duckdb
import polars as pl

from gpuwaste.config import Thresholds
from gpuwaste.warehouse.damaged import read_retrying
from gpuwaste.warehouse.store import sorted_by

# The readings passed on as they are, for the steps that read them: power and the energy counter
# (energy.py), the coarse busy metric and the fine activities (looks_busy.py). A host range reads
# only those its files can hold a value of (read_ahead.range_samples: most clusters have no
# energy counter or fine activity, and an all-null column costs its read and every step it goes
# through), so the steps take a reading absent from their frame as null throughout (`reading`).
PASSED_ON = ("power_w", "energy_j", "gpu_util", "sm_active", "tensor_active")

GPU_KEY_SPAN = 1 << 16  # gpu key = (position of the host in the batch's host list) * span + gpu
INSTANCE_SPAN = 64  # device_key = gpu key * span + (MIG instance + 1, or 0 for a whole GPU)


def _samples_sql(source: str, readings: Sequence[str]) -> str:
    """The query of `read` over `source` (the view `gpu_samples`, or a parenthesized SELECT of
    its columns over some of its files), with the columns `readings` of `PASSED_ON`."""
    unknown = [r for r in readings if r not in PASSED_ON]
    if unknown:
        raise ValueError(f"job_samples reads no column {unknown}: it passes on {list(PASSED_ON)}")
    passed = "".join(f", {r}" for r in PASSED_ON if r in readings)
    return f"""
select ((list_position($1::varchar[], host) * {GPU_KEY_SPAN} + gpu) * {INSTANCE_SPAN}
        + coalesce(gpu_instance + 1, 0))::bigint as device_key,
       ts, util, mem_used_mib, mem_total_mib{passed}
from {source} as gpu_samples
where cluster = getvariable('cluster')
  and date between getvariable('date_lo')::date and getvariable('date_hi')::date
  and host between getvariable('host_lo') and getvariable('host_hi')
  and util is not null
  and ts >= ($2::timestamptz[])[list_position($1::varchar[], host)]
  and ts < ($3::timestamptz[])[list_position($1::varchar[], host)]
"""


def _passed_on(frame: pl.DataFrame) -> list[str]:
    """The columns of `PASSED_ON` that `frame` has."""
    return [c for c in PASSED_ON if c in frame.columns]


def reading(frame: pl.DataFrame, name: str) -> pl.Expr:
    """Reading `name` of `PASSED_ON` in `frame`, or null throughout where the frame has none
    (its host range's files hold no value of it, so it was not read)."""
    if name not in PASSED_ON:
        raise ValueError(f"{name!r} is not a reading job_samples passes on ({list(PASSED_ON)})")
    return pl.col(name) if name in frame.columns else pl.lit(None, pl.Float64).alias(name)


def _seconds(delta: pl.Expr) -> pl.Expr:
    return delta.dt.total_microseconds().cast(pl.Float64) / 1e6


def _shared_flags(alloc: pl.DataFrame) -> pl.DataFrame:
    """Mark allocations that overlap another one on the same GPU (as the SQL's overlap_flags)."""
    by_gpu = alloc.sort("device_key", "start_ts", "alloc_id")
    return by_gpu.with_columns(
        (
            (pl.col("end_ts").cum_max().shift(1).over("device_key") > pl.col("start_ts")).fill_null(
                False
            )
            | (pl.col("start_ts").shift(-1).over("device_key") < pl.col("end_ts")).fill_null(False)
        ).alias("shared")
    )


def _sorted_by_gpu(samples: pl.DataFrame) -> pl.DataFrame:
    """Samples in (device_key, ts) order: a stable sort by GPU keeps each day's time order, and
    days come in order, so this is one cheap pass when the files are as stored; else a full
    sort."""
    out = samples.sort("device_key", maintain_order=True)
    return out if sorted_by(out, ["device_key", "ts"]) else samples.sort("device_key", "ts")


def _keyed(frame: pl.DataFrame, hosts: list[str]) -> pl.DataFrame:
    """`frame` with device_key, the same integer key of (host, gpu, gpu_instance) as
    `_samples_sql` computes in SQL (null for a host not in `hosts`), in place of host, gpu and
    gpu_instance: each MIG instance is a device of its own."""
    position = pl.col("host").replace_strict(
        hosts, list(range(1, len(hosts) + 1)), default=None, return_dtype=pl.Int64
    )
    has_instance = "gpu_instance" in frame.columns
    instance = (
        (pl.col("gpu_instance").cast(pl.Int64) + 1).fill_null(0) if has_instance else pl.lit(0)
    )
    gpu_key = position * GPU_KEY_SPAN + pl.col("gpu").cast(pl.Int64)
    return frame.with_columns((gpu_key * INSTANCE_SPAN + instance).alias("device_key")).drop(
        "host", "gpu", *(["gpu_instance"] if has_instance else [])
    )


def _keyed_allocations(alloc: pl.DataFrame) -> tuple[list[str], pl.DataFrame]:
    """The batch's hosts (sorted) and its allocations of known GPUs keyed by device_key."""
    known = alloc.filter(pl.col("gpu") >= 0)
    hosts = sorted(known["host"].unique().to_list())
    return hosts, _keyed(known, hosts)


def _compute_keyed(
    samples: pl.DataFrame, alloc: pl.DataFrame, idle_mem_floor_mib: float, window_s: float
) -> pl.DataFrame:
    """samples (device_key, ts, util, mem_used_mib, mem_total_mib) in stored order and allocations
    (alloc_id, device_key, start_ts, end_ts) -> the rows of test oracle job_samples.sql."""
    keyed = _shared_flags(alloc)
    samples = samples.filter(
        pl.col("util").is_not_null()
        & pl.col("device_key").is_in(keyed["device_key"].unique().implode())
    )
    samples = _sorted_by_gpu(samples)
    bounds = ["alloc_id", "start_ts", "end_ts"]
    exclusive = keyed.filter(~pl.col("shared")).select("device_key", *bounds)
    matched = samples.join_asof(
        exclusive.sort("device_key", "start_ts"),
        left_on="ts",
        right_on="start_ts",
        by="device_key",
        strategy="backward",
        check_sortedness=False,
    ).filter(pl.col("ts") < pl.col("end_ts"))
    shared = keyed.filter(pl.col("shared")).select("device_key", *bounds)
    if shared.height:
        in_shared = (
            samples.join(shared, on="device_key")
            .filter((pl.col("ts") >= pl.col("start_ts")) & (pl.col("ts") < pl.col("end_ts")))
            .sort("alloc_id", "ts")
        )
        matched = pl.concat([matched, in_shared.select(matched.columns)])
    idle = (pl.col("util") == 0) & (
        pl.col("mem_used_mib").fill_null(0) <= pl.lit(idle_mem_floor_mib, pl.Float64)
    )
    # held: utilization 0 with memory above the floor (memory held, no kernel; #44)
    held = (pl.col("util") == 0) & ~idle
    flagged = matched.with_columns(
        idle.alias("idle"),
        held.alias("held"),
        (pl.col("alloc_id") == pl.col("alloc_id").shift(1)).fill_null(False).alias("_same_prev"),
        (pl.col("alloc_id") == pl.col("alloc_id").shift(-1)).fill_null(False).alias("_same_next"),
    )
    same_prev, same_next = pl.col("_same_prev"), pl.col("_same_next")

    def prev(name: str) -> pl.Expr:
        return pl.when(same_prev).then(pl.col(name).shift(1)).alias(f"prev_{name}")

    def nxt(name: str) -> pl.Expr:
        return pl.when(same_next).then(pl.col(name).shift(-1)).alias(f"next_{name}")

    since_start = _seconds(pl.col("ts") - pl.col("start_ts"))
    return flagged.select(
        pl.col("alloc_id").cast(pl.Int64),
        "ts",
        "util",
        "mem_used_mib",
        "mem_total_mib",
        *_passed_on(flagged),
        "idle",
        "held",
        (~same_prev).alias("is_first"),
        _seconds(
            pl.col("ts") - pl.when(same_prev).then(pl.col("ts").shift(1)).otherwise("start_ts")
        ).alias("dt_s"),
        _seconds(pl.when(same_next).then(pl.col("ts").shift(-1)) - pl.col("ts")).alias("next_dt_s"),
        _seconds(pl.col("end_ts") - pl.col("ts")).alias("tail_s"),
        (since_start / 60).floor().alias("minute"),
        (since_start / pl.lit(float(window_s), pl.Float64)).floor().alias("window_no"),
        prev("idle"),
        prev("util"),
        nxt("idle"),
        prev("mem_used_mib").alias("prev_mem"),
        nxt("mem_used_mib").alias("next_mem"),
        prev("held"),
        nxt("held"),
    )


def _read_params(hosts: list[str], alloc_keyed: pl.DataFrame) -> list[list[str] | list[datetime]]:
    """The parameters of `_samples_sql`: `hosts` (as `_keyed_allocations` lists them) and, per host,
    the first start and the last end of its allocations. A batch's multi-host jobs hold hosts
    of other batches for a few hours, so only that span of a host's samples is read, not every
    day of the batch (faster at 8x: bench/RESULTS.md, "The allocator", per-host spans)."""
    spans = (
        alloc_keyed.group_by(pl.col("device_key") // (GPU_KEY_SPAN * INSTANCE_SPAN))
        .agg(pl.col("start_ts").min(), pl.col("end_ts").max())
        .sort("device_key")
    )
    return [hosts, spans["start_ts"].to_list(), spans["end_ts"].to_list()]


def read(
    con: duckdb.DuckDBPyConnection,
    alloc: pl.DataFrame,
    source: str = "gpu_samples",
    readings: Sequence[str] = PASSED_ON,
) -> pl.DataFrame:
    """The samples `compute` reads for `alloc` (the allocations of one host range): those of
    the variables' cluster, dates and hosts in stored order, keyed by GPU in SQL (no strings
    cross into polars), each host's over the span of its allocations. `source` is what they
    are read from: the view `gpu_samples`, or a parenthesized SELECT of the same columns over
    the files that hold these hosts' days (`catalog.view_sql`); `readings`, the columns of
    `PASSED_ON` read with them (the others are left out of the frame)."""
    hosts, alloc_keyed = _keyed_allocations(alloc)
    params = _read_params(hosts, alloc_keyed)
    sql = _samples_sql(source, readings)
    con.execute("set session preserve_insertion_order = true")
    try:
        return read_retrying(lambda: con.sql(sql, params=params).pl())
    finally:
        con.execute("reset session preserve_insertion_order")


def compute_read(
    range_samples: pl.DataFrame, range_alloc: pl.DataFrame, t: Thresholds
) -> pl.DataFrame:
    """job_samples for the allocations `range_alloc` from `range_samples`, as `read` returned
    them for the same allocations (the per-job pass's step)."""
    alloc_keyed = _keyed_allocations(range_alloc)[1]
    return _compute_keyed(range_samples, alloc_keyed, t.idle_mem_floor_mib, t.fluctuation_window_s)


def compute(
    con: duckdb.DuckDBPyConnection, alloc: pl.DataFrame, idle_mem_floor_mib: float, window_s: float
) -> pl.DataFrame:
    """job_samples for `alloc` (the allocations of one host range), reading the samples of the
    variables' cluster, dates and hosts (`read`)."""
    return _compute_keyed(
        read(con, alloc), _keyed_allocations(alloc)[1], idle_mem_floor_mib, window_s
    )
