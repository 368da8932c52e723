"""The per-job pass: for a batch of jobs, one window scan of their samples, then every per-job
result table (job_gpu_usage, idle_slots, stable_phases, job_util_hist, job_usage).

This module is the pass's wiring: its steps (`BATCH_STEPS`: `BATCH_DEVICES` once per batch,
`GPU_STEPS` per host range, then `GPU_STEP`, `HOST_STEP` and `JOB_STEP` once per batch), the
lists derived from them (`GPU_PARTS`, `RESULT_OF`), and `run_batch`. The runner is steps.py
(a Python step's inputs are its function's parameters), the reading of host ranges
read_ahead.py. Empty frames take their schemas from `PART_SCHEMAS` and the result tables.

Each per-job result is a pure function of one job's records and samples, so jobs are processed in
batches (by start day), and inside a batch the per-GPU pass runs over a range of hosts at a time
(sample files are sorted by host, so a range reads only its row groups): memory is bounded by
hosts x days, and a re-run of a job replaces exactly its rows. A thread reads the next host
range's samples while the steps run over the current one (`read_ahead`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Executor
from contextlib import closing
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import polars as pl

from gpuwaste.analyses import (
    allocation_sums,
    energy,
    idle_slots,
    job_samples,
    looks_busy,
    sample_flags,
    stable_phases,
)
from gpuwaste.analyses.host_ranges import RANGE_MAX_SAMPLES, HostRanges
from gpuwaste.analyses.range_parts import RangeParts
from gpuwaste.analyses.read_ahead import date_span, read_ahead
from gpuwaste.analyses.registry import BY_NAME
from gpuwaste.analyses.sqlfiles import (
    define_macros,
    load_sql,
    set_variables,
    threshold_variables,
)
from gpuwaste.analyses.steps import Relations, Step, conform_result, pure_step_threads, run_steps
from gpuwaste.config import Thresholds
from gpuwaste.errors import GpuwasteError
from gpuwaste.warehouse.catalog import days_unbound, narrow_dated_views
from gpuwaste.warehouse.store import sql_string


@dataclass
class BatchResult:
    frames: dict[str, pl.DataFrame] = field(default_factory=dict)
    unresolved_gpus: int = 0  # allocations with unknown GPU index and no labelled samples
    counter_set_aside: int = 0  # energy-counter increases no GPU could draw (energy.py)
    seconds: dict[str, float] = field(default_factory=dict)  # time per step, for the benchmark
    parts: dict[str, list[pl.DataFrame]] = field(default_factory=dict)

    def add(self, other: BatchResult) -> None:
        """Append another batch (frames are concatenated once, in `combined`)."""
        for name, df in other.frames.items():
            self.parts.setdefault(name, []).append(df)
        self.unresolved_gpus += other.unresolved_gpus
        self.counter_set_aside += other.counter_set_aside
        for step, secs in other.seconds.items():
            self.seconds[step] = self.seconds.get(step, 0.0) + secs

    def combined(self, name: str) -> pl.DataFrame | None:
        parts = self.parts.get(name) or ([self.frames[name]] if name in self.frames else [])
        return pl.concat(parts, how="vertical_relaxed") if parts else None


# The parts each host range adds up to, besides the result tables, and their schemas when empty
# (the GPUs' statistics and phase counts need none: without them the GPUs' rows are empty).
PART_SCHEMAS: dict[str, dict[str, pl.DataType]] = {
    "batch_fluctuation": {**allocation_sums.FLUCTUATION_SCHEMA, "fluctuating": pl.Boolean()},
    "batch_checkpoint": allocation_sums.CHECKPOINT_SCHEMA,
    "batch_energy": energy.SCHEMA,
    "batch_held_idle": idle_slots.HELD_SCHEMA,
    "batch_busy_evidence": looks_busy.SCHEMA,
}

# The columns of `analyze_alloc` a host range's steps read, as relation `range_alloc`.
RANGE_ALLOC_COLUMNS = (
    "alloc_id",
    "job_id",
    "attempt",
    "host",
    "gpu",
    "gpu_instance",
    "mig_profile",
    "gpu_weight",
    "start_ts",
    "end_ts",
    energy.MODEL,
    looks_busy.IDLE_POWER,
)


def _analysis_step(output: str, name: str) -> Step:
    """The step that runs registered analysis `name`'s SQL, with the inputs it declares."""
    a = BY_NAME[name]
    return Step(output, sql=a.sql_file, inputs=a.inputs, result=name)


# The per-GPU pass over one host range: its allocations (`range_alloc`) and their samples
# (`range_samples`), in order. Each function's parameters name the relations it reads.
GPU_STEPS: tuple[Step, ...] = (
    Step("job_samples", job_samples.compute_read),
    Step("sample_flags", sample_flags.compute),
    # pure: on two threads beside the steps that follow (run_steps), each after its inputs
    Step("allocation_sums", allocation_sums.compute, pure=True),
    Step("util_buckets", allocation_sums.util_buckets, pure=True),
    Step("level_runs", stable_phases.level_runs_frame, pure=True),
    Step("gpu_sample_stats", allocation_sums.gpu_sample_stats, pure=True),
    Step("batch_idle_slots", idle_slots.compute, pure=True, result="idle_slots"),
    Step("batch_held_idle", idle_slots.held_stretches, pure=True),
    Step("batch_energy", energy.compute, pure=True),
    Step("batch_checkpoint", allocation_sums.checkpointing, pure=True),
    # per job and bucket of one host range: conformed once the host ranges are summed
    Step(
        "batch_util_hist",
        allocation_sums.util_hist,
        pure=True,
        result="job_util_hist",
        conform=False,
    ),
    Step("batch_fluctuation", allocation_sums.fluctuation, pure=True),
    Step("batch_phases", stable_phases.merge_phases, pure=True, result="stable_phases"),
    Step("batch_phase_counts", stable_phases.phase_counts, pure=True),
    # per job of one host range: added up once the host ranges are done (_roll_up_parts)
    Step("batch_busy_evidence", looks_busy.evidence, pure=True),
)
# The SQL steps run once per batch, over all its hosts and days: none reads a range's samples,
# and a query per host range paid DuckDB's binding and planning each time, most of each query's
# time (bench/RESULTS.md). The models of the batch's devices and of its allocations, before the
# ranges; after them, the GPUs' rows from the ranges' parts, the hosts' CPU and memory, and the
# roll-up of the jobs.
BATCH_DEVICES = Step(
    "device_models", sql="staging/device_models", inputs=("gpu_samples",), temp_table=True
)
BATCH_MODELS = Step(
    "alloc_models",
    sql="staging/alloc_models",
    inputs=("analyze_alloc", "device_models"),
    temp_table=True,
)
GPU_STEP = _analysis_step("batch_gpu_usage", "job_gpu_usage")
HOST_STEP = Step(
    "batch_host_usage", sql="staging/job_host_usage", inputs=("analyze_alloc", "host_samples")
)
JOB_STEP = _analysis_step("batch_job_usage", "job_usage")
AFTER_RANGES: tuple[Step, ...] = (GPU_STEP, HOST_STEP, JOB_STEP)
# Every step of a batch, in the order they run.
BATCH_STEPS: tuple[Step, ...] = (BATCH_DEVICES, BATCH_MODELS, *GPU_STEPS, *AFTER_RANGES)
# Batch relation -> the result table it is (a part of).
RESULT_OF: dict[str, str] = {s.output: s.result for s in BATCH_STEPS if s.result}
# What each host range hands on to the roll-up of the jobs (parts added up over host ranges):
# what the steps after the ranges read, and the result tables' rows.
GPU_PARTS: tuple[str, ...] = tuple(
    s.output
    for s in GPU_STEPS
    if s.output in RESULT_OF or any(s.output in after.inputs for after in AFTER_RANGES)
)


_DEVICE_COLUMNS = (
    "job_id, attempt, host, gpu, gpu_instance, mig_profile, gpu_model, gpu_weight, start_ts, end_ts"
)
HOST_NEWEST = "host_newest"  # the SQL variable staging/allocations.sql bounds running ones by


def _bound_running(rel: Relations, as_of: datetime, thresholds: Thresholds) -> None:
    """Set `HOST_NEWEST` to the hosts whose newest sample + one sampling interval is before
    `as_of` (the usual case: none, every host reports up to the watermark), by which
    staging/allocations.sql ends their running allocations (the batch's own and their devices'
    sharers alike). Reads `alloc_intervals`; the samples' views must name the batch's days."""
    con = rel.con
    running = con.execute("select count(*) from alloc_intervals where end_ts >= $1", [as_of])
    if not running.fetchall()[0][0]:
        return  # no running allocation: no samples to read
    newest = rel.query(load_sql("staging/host_newest"))
    if newest.height == 0:
        return
    step = timedelta(seconds=thresholds.sampling_interval_s or thresholds.fallback_interval_s)
    behind = newest.filter(pl.col("newest_ts") + step < as_of)
    if behind.height == 0:
        return
    con.execute(
        f"set variable {HOST_NEWEST} = map($1::varchar[], $2::timestamptz[])",
        [behind["host"].to_list(), behind["newest_ts"].to_list()],
    )


def _resolve_unknown(rel: Relations) -> int:
    """Replace allocations with GPU index -1 by the GPUs whose samples carry the job's label."""
    con = rel.con
    unknown = con.execute("select count(*) from analyze_alloc where gpu < 0").fetchall()[0]
    if not unknown or not unknown[0]:
        return 0
    rel.frame("resolved_gpus", rel.query(load_sql("staging/resolve_unknown_gpus")))
    missing = rel.query(
        "select count(*) as n from analyze_alloc u where gpu < 0 and not exists "
        "(select 1 from resolved_gpus r where r.job_id = u.job_id and r.attempt = u.attempt "
        "and r.host = u.host)"
    )["n"].item()
    rel.table(
        "analyze_alloc",
        "select row_number() over (order by job_id, attempt, host, gpu, gpu_instance) as alloc_id"
        f", * from (select {_DEVICE_COLUMNS} from analyze_alloc where gpu >= 0 "
        f"union select {_DEVICE_COLUMNS} from resolved_gpus)",
    )
    rel.release("resolved_gpus")
    return int(missing)


def _gpu_pass(
    con: duckdb.DuckDBPyConnection,
    samples: pl.DataFrame,
    alloc: pl.DataFrame,
    thresholds: Thresholds,
    record_time: Callable[[str], None],
    pure_threads: Executor,
) -> dict[str, pl.DataFrame]:
    """The parts (GPU_PARTS) for the allocations `alloc` (one host range's, rows of
    `analyze_alloc`), whose samples (`job_samples.read`) are `samples`. No step reads the
    connection's variables: the range's SQL steps moved to the batch (`BATCH_STEPS`)."""
    if not alloc.height:
        return {}
    with Relations(con) as rel:
        rel.frame("range_samples", samples)
        rel.frame("range_alloc", alloc.select(RANGE_ALLOC_COLUMNS))
        record_time("range_alloc")
        return run_steps(rel, GPU_STEPS, GPU_PARTS, thresholds, record_time, pure_threads)


def _empty(name: str) -> pl.DataFrame | None:
    """The rows of part `name` when no host range gave any (None: a part only the GPUs' rows
    read, which are then empty themselves)."""
    if name in RESULT_OF:
        return conform_result(pl.DataFrame(), RESULT_OF[name])
    return pl.DataFrame(schema=PART_SCHEMAS[name]) if name in PART_SCHEMAS else None


def _roll_up_parts(
    parts: dict[str, list[pl.DataFrame]], thresholds: Thresholds
) -> dict[str, pl.DataFrame]:
    """The parts of every host range as one frame each: per-GPU rows concatenated, per-job
    counts (minutes, fluctuation windows, checkpointing GPUs) added up."""

    def combined(name: str) -> pl.DataFrame | None:
        frames = parts.get(name, [])
        return pl.concat(frames, how="vertical_relaxed") if frames else None

    out = {name: combined(name) for name in GPU_PARTS}
    hist = out["batch_util_hist"]
    if hist is not None and hist.height:
        out["batch_util_hist"] = conform_result(
            hist.group_by("job_id", "bucket").agg(pl.col("gpu_minutes").sum()), "job_util_hist"
        )
    else:
        out["batch_util_hist"] = None
    fluct = out["batch_fluctuation"]
    share = thresholds.fluctuation_job_share
    out["batch_fluctuation"] = (
        fluct.group_by("job_id")
        .agg(pl.col("windows").sum(), pl.col("fluctuating_windows").sum())
        .with_columns(
            (pl.col("fluctuating_windows") > share * pl.col("windows")).alias("fluctuating")
        )
        if fluct is not None and fluct.height
        else None
    )
    ckpt = out["batch_checkpoint"]
    out["batch_checkpoint"] = (
        ckpt.group_by("job_id").agg(pl.col("checkpointing_gpus").sum())
        if ckpt is not None and ckpt.height
        else None
    )
    busy = out["batch_busy_evidence"]
    out["batch_busy_evidence"] = (
        looks_busy.per_job(busy) if busy is not None and busy.height else None
    )
    filled = {name: df if df is not None else _empty(name) for name, df in out.items()}
    return {name: df for name, df in filled.items() if df is not None}


def _allocations(
    rel: Relations,
    cluster: str,
    as_of: datetime,
    thresholds: Thresholds,
    shared_spans: Path | None,
    data_dir: Path | None,
) -> tuple[pl.DataFrame, int]:
    """The batch's allocations as temp table `analyze_alloc` (and as a frame), bounded and
    resolved, with the views of the samples over the batch's days; and how many allocations of
    an unknown GPU stayed unresolved."""
    con = rel.con
    rel.table(
        "shared_spans",
        f"select * from read_parquet({sql_string(shared_spans)})"
        if shared_spans
        else load_sql("plan/shared_spans"),
    )
    # the intervals first (their days and hosts name the samples that bound running ones:
    # a running sharer's too, not a finished one's), then the allocations once, bounded and with
    # shared devices divided
    rel.table("alloc_intervals", load_sql("staging/alloc_intervals"))
    spans = con.sql("select host, start_ts, end_ts from alloc_intervals where own or running").pl()
    span = date_span(spans)
    lo, hi = span if span else (as_of.date(), as_of.date())
    set_variables(con, {"date_lo": lo, "date_hi": hi})
    if data_dir is not None:
        hosts = spans["host"].drop_nulls().unique().to_list()
        narrow_dated_views(con, data_dir, cluster, lo, hi, hosts)
    elif days_unbound(con):
        raise GpuwasteError(
            "run_batch was given a connection whose samples' views name no file "
            "(connect(dated=False)) and no data_dir to name them from"
        )
    _bound_running(rel, as_of, thresholds)
    rel.table("analyze_alloc", load_sql("staging/allocations"))
    rel.release("alloc_intervals")
    unresolved = _resolve_unknown(rel)
    return con.sql("select * from analyze_alloc").pl(), unresolved


def _with_device_models(rel: Relations, alloc: pl.DataFrame, made: bool) -> pl.DataFrame:
    """`alloc` with `energy.MODEL`: the model its device's samples name (`device_models`, if
    `made`), else the scheduler's GPU type; energy.py bounds a counter's increase by it. (The
    cluster's `gpu_models` host patterns, alloc_models.sql's middle choice, are not read: a
    device without either falls back to the declared maximum.) And `looks_busy.IDLE_POWER`, the
    idle power of its model as alloc_models.sql chooses it (null: none measured, or not
    `made`)."""
    key = ["host", "gpu", "gpu_instance"]
    idle = looks_busy.IDLE_POWER
    if made:
        models = rel.query(f"select {', '.join(key)}, gpu_model as sample_model from device_models")
        powers = rel.query(f"select alloc_id, {idle} from alloc_models")
    else:
        models = pl.DataFrame(schema={**alloc.select(key).schema, "sample_model": pl.String})
        powers = pl.DataFrame(schema={"alloc_id": alloc.schema["alloc_id"], idle: pl.Float64})
    joined = alloc.join(models, on=key, how="left", nulls_equal=True, maintain_order="left")
    joined = joined.join(powers, on="alloc_id", how="left", maintain_order="left")
    model = pl.coalesce("sample_model", "gpu_model").alias(energy.MODEL)
    return joined.with_columns(model).drop("sample_model")


def run_batch(
    con: duckdb.DuckDBPyConnection,
    cluster: str,
    job_ids: list[str],
    thresholds: Thresholds,
    as_of: datetime,
    batch_hosts: int = 8,
    shared_spans: Path | None = None,
    range_samples: int = RANGE_MAX_SAMPLES,
    data_dir: Path | None = None,
) -> BatchResult:
    """Every per-job table for `job_ids` of `cluster` (con: a warehouse connection).

    `shared_spans` is the run's list of allocations that may share a device (the plan's
    `plan/shared_spans.sql` file); without it the batch makes the list itself, from the whole
    cluster's allocations.

    With `data_dir` (the warehouse of `con`, a connection of the batch's own, made with
    `connect(data_dir, dated=False)`), the views of the samples on `con` are defined over the
    cluster's days the batch reads (`narrow_dated_views`), so that what DuckDB binds and keeps
    of their files does not grow with the warehouse's history.

    The per-GPU pass runs over ranges of at most `batch_hosts` hosts and about `range_samples`
    samples (`HostRanges`; each reads only its hosts' row groups), then the jobs are rolled up
    once from the per-GPU rows of all hosts (held until then in `RangeParts`, on disk past a
    bound). Every name the batch puts on `con` is taken off again when it returns or raises.
    """
    result = BatchResult()
    clock = [time.perf_counter()]

    def record_time(step: str) -> None:
        now = time.perf_counter()
        result.seconds[step] = result.seconds.get(step, 0.0) + now - clock[0]
        clock[0] = now

    set_variables(
        con,
        {**threshold_variables(thresholds), "cluster": cluster, "as_of": as_of, HOST_NEWEST: None},
    )
    define_macros(con)
    with Relations(con) as rel:
        rel.frame("analyze_batch", pl.DataFrame({"job_id": job_ids}, schema={"job_id": pl.String}))
        alloc_all, result.unresolved_gpus = _allocations(
            rel, cluster, as_of, thresholds, shared_spans, data_dir
        )
        ranges = HostRanges.of(alloc_all, batch_hosts, range_samples)
        if ranges.hosts:  # over the batch's hosts, first to last, and its days
            set_variables(con, {"host_lo": ranges.hosts[0], "host_hi": ranges.hosts[-1]})
            BATCH_DEVICES.run(rel, thresholds)
            BATCH_MODELS.run(rel, thresholds)
        alloc_all = _with_device_models(rel, alloc_all, bool(ranges.hosts))
        record_time("allocations")

        # the ranges' parts, on disk past 16 MiB: they grow with the hosts a batch reaches
        with closing(RangeParts()) as parts:
            with (
                closing(read_ahead(con, cluster, alloc_all, ranges, data_dir)) as read,
                pure_step_threads() as pure_threads,
            ):
                for _, alloc, samples in read:
                    record_time("read (waited for)")
                    parts.add(_gpu_pass(con, samples, alloc, thresholds, record_time, pure_threads))
                    record_time("range parts (held, or written past 16 MiB)")
                    del samples
            batch = _roll_up_parts(parts.read(), thresholds)
            energy_rows = batch.get("batch_energy")
            if energy_rows is not None and energy_rows.height:
                result.counter_set_aside = int(energy_rows["counter_set_aside"].sum())
            record_time("range parts (held, or written past 16 MiB)")
        _after_ranges(rel, batch, thresholds, record_time)
    result.frames = {RESULT_OF[name]: batch[name] for name in RESULT_OF}
    return result


def _after_ranges(
    rel: Relations,
    batch: dict[str, pl.DataFrame],
    thresholds: Thresholds,
    record_time: Callable[[str], None],
) -> None:
    """The batch's SQL steps after the host ranges (`AFTER_RANGES`), over the ranges' parts
    rolled up in `batch`; each output is added to `batch`."""
    if "gpu_sample_stats" not in batch:  # no allocation in the batch, so no GPU
        batch[GPU_STEP.output] = conform_result(pl.DataFrame(), "job_gpu_usage")
    for step in AFTER_RANGES:
        if step.output in batch:
            continue
        for name in step.inputs:
            if name in batch:
                rel.frame(name, batch[name])
        step.run(rel, thresholds)
        batch[step.output] = rel.frames[step.output]
        record_time(step.output)


__all__ = [
    "BATCH_STEPS",
    "GPU_PARTS",
    "GPU_STEPS",
    "JOB_STEP",
    "RESULT_OF",
    "BatchResult",
    "run_batch",
]
