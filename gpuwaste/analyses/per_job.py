"""The per-job pass: for a batch of jobs, one window scan of their samples, then every per-job
result table (job_gpu_usage, idle_slots, stable_phases, job_util_hist, job_usage).

The pass is a list of `Step`s (`BATCH_STEPS`: `BATCH_DEVICES` once per batch, `GPU_STEPS` per
host range, then `GPU_STEP`, `HOST_STEP` and `JOB_STEP` once per batch), each naming the
relations it reads and the one it writes. The SQL files read those relations by name, so each
output is put on the DuckDB connection under its name inside `Relations`, a context manager that
takes every name off again when the pass ends, on an error too; an output is released as soon as
the last step that reads it has run. A pure step (polars, numpy or compiled loops over frames,
no connection) runs on one of two threads beside the steps after it, and its output is put on
the connection when a SQL step reads it. Empty frames take their schemas from `PART_SCHEMAS` and
the result tables.

Each per-job result is a pure function of one job's records and samples, so jobs are processed in
batches (by start day), and inside a batch the per-GPU pass runs over a range of hosts at a time
(sample files are sorted by host, so a range reads only its row groups): memory is bounded by
hosts x days, and a re-run of a job replaces exactly its rows. A thread reads the next host
range's samples while the steps run over the current one (`_read_ahead`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterable, Mapping
from concurrent.futures import Executor, Future, ThreadPoolExecutor, wait
from contextlib import ExitStack, closing
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from types import TracebackType

import duckdb
import polars as pl

from gpuwaste.analyses import (
    allocation_sums,
    idle_slots,
    job_samples,
    sample_flags,
    stable_phases,
)
from gpuwaste.analyses.host_ranges import RANGE_MAX_SAMPLES, HostRanges
from gpuwaste.analyses.range_parts import RangeParts
from gpuwaste.analyses.registry import BY_NAME
from gpuwaste.analyses.sqlfiles import load_sql, set_variables, threshold_variables
from gpuwaste.config import Thresholds
from gpuwaste.errors import GpuwasteError
from gpuwaste.warehouse.catalog import cursor, days_unbound, narrow_dated_views, view_sql
from gpuwaste.warehouse.schema import GPU_SAMPLES, conform, table
from gpuwaste.warehouse.store import Warehouse, sql_string


@dataclass
class BatchResult:
    frames: dict[str, pl.DataFrame] = field(default_factory=dict)
    unresolved_gpus: int = 0  # allocations with unknown GPU index and no labelled samples
    seconds: dict[str, float] = field(default_factory=dict)  # time per step, for the benchmark
    parts: dict[str, list[pl.DataFrame]] = field(default_factory=dict)

    def add(self, other: BatchResult) -> None:
        """Append another batch (frames are concatenated once, in `combined`)."""
        for name, df in other.frames.items():
            self.parts.setdefault(name, []).append(df)
        self.unresolved_gpus += other.unresolved_gpus
        for step, secs in other.seconds.items():
            self.seconds[step] = self.seconds.get(step, 0.0) + secs

    def combined(self, name: str) -> pl.DataFrame | None:
        parts = self.parts.get(name) or ([self.frames[name]] if name in self.frames else [])
        return pl.concat(parts, how="vertical_relaxed") if parts else None


def _conform(df: pl.DataFrame, name: str) -> pl.DataFrame:
    t = table(name)
    if not df.columns:  # nothing computed (a batch without allocations): no rows, not a null row
        return pl.DataFrame(schema=t.stored_columns)
    return conform(df, t, stored=True)


# The parts each host range adds up to, besides the result tables, and their schemas when empty
# (the GPUs' statistics and phase counts need none: without them the GPUs' rows are empty).
PART_SCHEMAS: dict[str, dict[str, pl.DataType]] = {
    "batch_fluctuation": {**allocation_sums.FLUCTUATION_SCHEMA, "fluctuating": pl.Boolean()},
    "batch_checkpoint": allocation_sums.CHECKPOINT_SCHEMA,
}


class Relations:
    """Frames and temp tables put on a DuckDB connection by name for one pass; every name is
    taken off when the `with` block ends, whether it ends normally or by an error. A frame
    reaches the connection only when SQL runs (`query`, `table`, `expose`): registering one costs
    1-2 ms, and most steps of a host range are polars and numpy, which read the frames as they
    are."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con
        self.frames: dict[str, pl.DataFrame] = {}
        self._tables: list[str] = []
        self._exposed: set[str] = set()

    def frame(self, name: str, df: pl.DataFrame) -> pl.DataFrame:
        self.frames[name] = df
        self._exposed.discard(name)  # (again) before the next SQL
        return df

    def expose(self) -> None:
        """Every frame on the connection under its name (for SQL run on `con` directly)."""
        for name, df in self.frames.items():
            if name not in self._exposed:
                self.con.register(name, df)
                self._exposed.add(name)

    def query(self, sql: str) -> pl.DataFrame:
        """The rows of `sql` over the connection and the frames."""
        self.expose()
        return self.con.sql(sql).pl()

    def table(self, name: str, sql: str) -> None:
        self.expose()
        self.con.execute(f"create or replace temp table {name} as {sql}")
        if name not in self._tables:
            self._tables.append(name)

    def release(self, name: str) -> None:
        if self.frames.pop(name, None) is not None and name in self._exposed:
            self._exposed.discard(name)
            self.con.unregister(name)
        if name in self._tables:
            self._tables.remove(name)
            self.con.execute(f"drop table if exists {name}")

    def __enter__(self) -> Relations:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for name in [*self.frames, *self._tables]:
            try:
                self.release(name)
            except duckdb.Error:
                if exc is None:
                    raise  # a failure while cleaning up is reported only if nothing else was


# A step over frames (polars or numpy, no connection): (the pass's frames, the thresholds) -> its
# output. As `fn`, it runs on the pass's thread; as `pure`, on a thread beside the next steps.
FrameFn = Callable[[Mapping[str, pl.DataFrame], Thresholds], pl.DataFrame]


@dataclass(frozen=True)
class Step:
    """One step of the pass: relation `output`, made from the relations `inputs` by the SQL file
    `sql` (under gpuwaste/sql/), by the polars function `fn`, or by the pure function `pure`
    (polars or numpy over frames, no connection: `run_steps` runs it on a thread beside the next
    steps); conformed to result table `result` if given; a temp table when `temp_table` (read by
    several SQL steps), else a frame. Inputs not made by an earlier step are the warehouse's
    views or the batch's temp tables."""

    output: str
    inputs: tuple[str, ...]
    sql: str = ""
    fn: FrameFn | None = None
    result: str = ""
    temp_table: bool = False
    pure: FrameFn | None = None

    def compute(
        self, sources: Mapping[str, pl.DataFrame | Future[pl.DataFrame]], thresholds: Thresholds
    ) -> pl.DataFrame:
        """The output of a `pure` step from its inputs (a future: a pure step submitted before
        it, so already taken by a thread of the same pool and not waiting for this one)."""
        if self.pure is None:
            raise ValueError(f"step {self.output} is not pure")
        frames = {n: f.result() if isinstance(f, Future) else f for n, f in sources.items()}
        df = self.pure(frames, thresholds)
        return _conform(df, self.result) if self.result else df

    def run(self, rel: Relations, thresholds: Thresholds) -> None:
        if self.sql and self.temp_table:
            rel.table(self.output, load_sql(self.sql))
            return
        frame_fn = self.fn or self.pure
        if self.sql:
            df = rel.query(load_sql(self.sql))
        elif frame_fn is not None:
            df = frame_fn(rel.frames, thresholds)
        else:
            raise ValueError(f"step {self.output} has neither sql nor fn")
        rel.frame(self.output, _conform(df, self.result) if self.result else df)


def run_steps(
    rel: Relations,
    steps: tuple[Step, ...],
    keep: tuple[str, ...],
    thresholds: Thresholds,
    lap: Callable[[str], None],
    beside: Executor | None = None,
) -> dict[str, pl.DataFrame]:
    """Run `steps` in order on `rel`; each output is released after the last step that reads it,
    except those in `keep`, whose frames are returned (`rel` takes their names off at its end).

    A `pure` step runs on a thread of `beside` while the next steps run on the connection (the
    SQL steps use 1.5-1.8 of 2 cores, a numpy step one): its output is put on the connection
    when a step that is not pure reads it, or at the end if kept. A step that waits for it
    counts the wait in `lap` as "pure steps (waited for)". `beside`: the threads pure steps run
    on (`_beside_threads`; a batch keeps them for all its host ranges: memory a thread frees is
    reused by that thread, and new threads per range took 0.3 GiB more at 8x); without it,
    threads of their own."""
    last_reader = {name: i for i, step in enumerate(steps) for name in step.inputs}
    made: set[str] = set()
    with ExitStack() as stack:
        if beside is None:
            beside = stack.enter_context(_beside_threads())
        pending: dict[str, Future[pl.DataFrame]] = {}

        def land(names: Iterable[str]) -> None:
            waiting = [n for n in names if n in pending]
            for name in waiting:
                rel.frame(name, pending.pop(name).result())
            if waiting:
                lap("pure steps (waited for)")

        for i, step in enumerate(steps):
            if step.pure is not None:
                sources = {n: pending.get(n) or rel.frames[n] for n in step.inputs}
                pending[step.output] = beside.submit(step.compute, sources, thresholds)
            else:
                land(step.inputs)
                step.run(rel, thresholds)
                lap(step.output)
            made.add(step.output)
            for name in [
                n for n in step.inputs if n in made and last_reader[n] == i and n not in keep
            ]:
                pending.pop(name, None)  # read by pure steps only: they hold it until done
                rel.release(name)
        land([name for name in keep if name in pending])
        for future in pending.values():
            future.result()  # a pure step that nothing reads: its error is not lost
    return {name: rel.frames[name] for name in keep if name in rel.frames}


def _beside_threads() -> ThreadPoolExecutor:
    """The threads `run_steps` runs pure steps on: two, so that while the SQL steps wait for the
    pure ones (one numpy step uses one core) both cores work (bench/RESULTS.md)."""
    return ThreadPoolExecutor(2, thread_name_prefix="gpuwaste-step")


def _allocations(frames: Mapping[str, pl.DataFrame], t: Thresholds) -> pl.DataFrame:
    """The range's allocations (`analyze_alloc`'s rows, already in polars: no query per range)."""
    return frames["range_alloc"].select(
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
    )


def _job_samples(frames: Mapping[str, pl.DataFrame], t: Thresholds) -> pl.DataFrame:
    return job_samples.compute_read(
        frames["range_samples"], frames["batch_alloc"], t.idle_mem_floor_mib, t.fluctuation_window_s
    )


def _sample_flags(frames: Mapping[str, pl.DataFrame], t: Thresholds) -> pl.DataFrame:
    return sample_flags.compute(frames["job_samples"], t)


def _allocation_sums(frames: Mapping[str, pl.DataFrame], t: Thresholds) -> pl.DataFrame:
    return allocation_sums.compute(frames["sample_flags"], t)


def _gpu_sample_stats(frames: Mapping[str, pl.DataFrame], t: Thresholds) -> pl.DataFrame:
    return allocation_sums.gpu_sample_stats(frames["allocation_sums"])


def _checkpoint(frames: Mapping[str, pl.DataFrame], t: Thresholds) -> pl.DataFrame:
    return allocation_sums.checkpointing(frames["allocation_sums"], frames["batch_alloc"], t)


def _idle_slots(frames: Mapping[str, pl.DataFrame], t: Thresholds) -> pl.DataFrame:
    return idle_slots.compute(
        frames["sample_flags"], frames["gpu_sample_stats"], frames["batch_alloc"], t
    )


def _util_buckets(frames: Mapping[str, pl.DataFrame], t: Thresholds) -> pl.DataFrame:
    return allocation_sums.util_buckets(frames["sample_flags"])


def _util_hist(frames: Mapping[str, pl.DataFrame], t: Thresholds) -> pl.DataFrame:
    return allocation_sums.util_hist(frames["util_buckets"], frames["batch_alloc"])


def _fluctuation(frames: Mapping[str, pl.DataFrame], t: Thresholds) -> pl.DataFrame:
    return allocation_sums.fluctuation(frames["allocation_sums"], frames["batch_alloc"])


def _level_runs(frames: Mapping[str, pl.DataFrame], t: Thresholds) -> pl.DataFrame:
    return stable_phases.level_runs_frame(frames["sample_flags"], t)


def _phases(frames: Mapping[str, pl.DataFrame], t: Thresholds) -> pl.DataFrame:
    return stable_phases.merge_phases(frames["level_runs"], frames["batch_alloc"], t)


def _phase_counts(frames: Mapping[str, pl.DataFrame], t: Thresholds) -> pl.DataFrame:
    return stable_phases.phase_counts(frames["batch_phases"])


def _analysis_step(output: str, name: str) -> Step:
    """The step that runs registered analysis `name`'s SQL, with the inputs it declares."""
    a = BY_NAME[name]
    return Step(output, a.inputs, sql=a.sql_file, result=name)


# The per-GPU pass over the allocations in `analyze_alloc` (one host range), in order.
GPU_STEPS: tuple[Step, ...] = (
    Step("batch_alloc", ("range_alloc",), fn=_allocations),
    Step("job_samples", ("batch_alloc", "range_samples"), fn=_job_samples),
    Step("sample_flags", ("job_samples",), fn=_sample_flags),
    # pure: on two threads beside the steps that follow (run_steps), each after its inputs
    Step("allocation_sums", ("sample_flags",), pure=_allocation_sums),
    Step("util_buckets", ("sample_flags",), pure=_util_buckets),
    Step("level_runs", ("sample_flags",), pure=_level_runs),
    Step("gpu_sample_stats", ("allocation_sums",), pure=_gpu_sample_stats),
    Step(
        "batch_idle_slots",
        ("sample_flags", "gpu_sample_stats", "batch_alloc"),
        pure=_idle_slots,
        result="idle_slots",
    ),
    Step("batch_checkpoint", ("allocation_sums", "batch_alloc"), pure=_checkpoint),
    # per job and bucket of one host range: conformed once the host ranges are summed
    Step("batch_util_hist", ("util_buckets", "batch_alloc"), pure=_util_hist),
    Step("batch_fluctuation", ("allocation_sums", "batch_alloc"), pure=_fluctuation),
    Step("batch_phases", ("level_runs", "batch_alloc"), pure=_phases, result="stable_phases"),
    Step("batch_phase_counts", ("batch_phases",), pure=_phase_counts),
)
# What each host range hands on to the roll-up of the jobs (parts added up over host ranges).
GPU_PARTS = (
    "gpu_sample_stats",
    "batch_phase_counts",
    "batch_idle_slots",
    "batch_phases",
    "batch_util_hist",
    "batch_fluctuation",
    "batch_checkpoint",
)
# The SQL steps run once per batch, over all its hosts and days: none reads a range's samples,
# and a query per host range cost 10-20 ms of DuckDB's binding and planning each time, most of
# each query's time (bench/RESULTS.md). The models of the batch's devices, before the ranges;
# after them, the GPUs' rows from the ranges' parts, the hosts' CPU and memory, and the roll-up of
# the jobs.
BATCH_DEVICES = Step(
    "device_models", ("gpu_samples",), sql="staging/device_models", temp_table=True
)
GPU_STEP = _analysis_step("batch_gpu_usage", "job_gpu_usage")
HOST_STEP = Step(
    "batch_host_usage", ("analyze_alloc", "host_samples"), sql="staging/job_host_usage"
)
JOB_STEP = _analysis_step("batch_job_usage", "job_usage")
# Every step of a batch, in the order they run.
BATCH_STEPS: tuple[Step, ...] = (BATCH_DEVICES, *GPU_STEPS, GPU_STEP, HOST_STEP, JOB_STEP)
# Batch relation -> the result table it is a part of.
RESULT_OF = {
    "batch_gpu_usage": "job_gpu_usage",
    "batch_idle_slots": "idle_slots",
    "batch_phases": "stable_phases",
    "batch_util_hist": "job_util_hist",
    "batch_job_usage": "job_usage",
}


def date_span(alloc: pl.DataFrame) -> tuple[date, date] | None:
    """The UTC days the allocations of `alloc` (start_ts, end_ts) cover, first and last, the one
    rule for which days of samples a pass reads: an allocation's end is exclusive, so one that
    ends at midnight does not reach the next day. None when `alloc` has no rows."""
    start, end = alloc["start_ts"].min(), alloc["end_ts"].max()
    if not isinstance(start, datetime) or not isinstance(end, datetime):
        return None
    last = end - timedelta(microseconds=1)
    return _utc(start).date(), _utc(last).date()


def _utc(ts: datetime) -> datetime:
    return ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts.astimezone(UTC)


def range_allocations(alloc_all: pl.DataFrame, host_range: tuple[str, str]) -> pl.DataFrame:
    """The allocations of `alloc_all` on the hosts of `host_range` (inclusive, by name)."""
    lo, hi = host_range
    return alloc_all.filter(pl.col("host").is_between(pl.lit(lo), pl.lit(hi)))


_DEVICE_COLUMNS = (
    "job_id, attempt, host, gpu, gpu_instance, mig_profile, gpu_model, gpu_weight, start_ts, end_ts"
)


HOST_NEWEST = "host_newest"  # the SQL variable staging/allocations.sql bounds running ones by


def _bound_running(rel: Relations, as_of: datetime, thresholds: Thresholds) -> None:
    """End each running allocation at its own host's newest sample + one sampling interval when
    that is before `as_of` (the rule is staging/allocations.sql's): `analyze_alloc` is made
    again with the bound when any allocation changes, else left as it is (the usual case: every
    host reports up to the watermark). The samples' views must name the batch's days."""
    con = rel.con
    running = con.execute("select count(*) from analyze_alloc where end_ts >= $1", [as_of])
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
    rel.table("analyze_alloc", load_sql("staging/allocations"))


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
    lap: Callable[[str], None],
    beside: Executor,
) -> dict[str, pl.DataFrame]:
    """The parts (GPU_PARTS) for the allocations `alloc` (one host range's, rows of
    `analyze_alloc`), whose samples (`job_samples.read`) are `samples`. No step reads the
    connection's variables: the range's SQL steps moved to the batch (`BATCH_STEPS`)."""
    if not alloc.height:
        return {}
    with Relations(con) as rel:
        rel.frame("range_samples", samples)
        rel.frame("range_alloc", alloc)
        return run_steps(rel, GPU_STEPS, GPU_PARTS, thresholds, lap, beside)


def _range_samples(
    con: duckdb.DuckDBPyConnection,
    cluster: str,
    alloc_all: pl.DataFrame,
    host_range: tuple[str, str],
    data_dir: Path | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The allocations of `alloc_all` on the hosts of `host_range`, and their samples
    (`job_samples.read`, over the days `date_span` gives them). With `data_dir` (the warehouse
    of `con`), they are read from the files of those days that hold the range's hosts only
    (`Warehouse.day_files`), not through the batch's views, which name the files of every host
    the batch reaches: a range binds the footers of its own blocks."""
    alloc = range_allocations(alloc_all, host_range)
    span = date_span(alloc)
    if span is None:
        return alloc, pl.DataFrame()  # no allocation: `_gpu_pass` reads nothing either
    source = "gpu_samples"
    if data_dir is not None:
        wh = Warehouse(data_dir)
        files = wh.day_files(GPU_SAMPLES.name, cluster, *span, alloc["host"].unique().to_list())
        source = f"({view_sql(wh, GPU_SAMPLES, only=files)})"
    set_variables(
        con,
        {
            "cluster": cluster,
            "host_lo": host_range[0],
            "host_hi": host_range[1],
            "date_lo": span[0],
            "date_hi": span[1],
        },
    )
    return alloc, job_samples.read(con, alloc, source)


def _read_ahead(
    con: duckdb.DuckDBPyConnection,
    cluster: str,
    alloc_all: pl.DataFrame,
    ranges: HostRanges,
    data_dir: Path | None = None,
) -> Generator[tuple[tuple[str, str], pl.DataFrame, pl.DataFrame]]:
    """Each host range of `ranges` with its allocations and their samples (`_range_samples`),
    read one range ahead (a range is cut when the one before it has been read, from the samples
    read so far: `HostRanges`): while the caller works on a range, a thread reads the next one's
    samples on a cursor of `con` (DuckDB decoding parquet uses the cores the caller's steps leave
    idle: they use 1.1-1.8 of 2). 4 % less time at 1x, 9-13 % at 8x, for one range's samples
    more in memory (0.13-0.17 GiB at the peak; bench/RESULTS.md). `data_dir`: as
    `_range_samples` takes it. Use it closed (`contextlib.closing`): when the caller stops
    early, the read in flight is interrupted and waited for, and the cursor closed."""
    reader = cursor(con)
    try:
        with ThreadPoolExecutor(1, thread_name_prefix="gpuwaste-read") as pool:
            host_range = ranges.next()
            ahead = (
                [pool.submit(_range_samples, reader, cluster, alloc_all, host_range, data_dir)]
                if host_range is not None
                else []
            )
            try:
                while host_range is not None:
                    alloc, samples = ahead.pop().result()
                    ranges.read(host_range, samples.height)
                    following = ranges.next()
                    if following is not None:
                        ahead.append(
                            pool.submit(
                                _range_samples, reader, cluster, alloc_all, following, data_dir
                            )
                        )
                    yield host_range, alloc, samples
                    host_range = following
            except GeneratorExit:
                # the caller stopped early (a step failed): the next range's read is not wanted.
                # DuckDB drops an interrupt sent before the query starts (the read lists its
                # files first), so it is sent again until the read has ended.
                if ahead and not ahead[0].cancel():
                    while not ahead[0].done():
                        reader.interrupt()
                        wait(ahead, timeout=0.05)
                raise
    finally:
        reader.close()


def _empty(name: str) -> pl.DataFrame | None:
    """The rows of part `name` when no host range gave any (None: a part only the GPUs' rows
    read, which are then empty themselves)."""
    if name in RESULT_OF:
        return _conform(pl.DataFrame(), RESULT_OF[name])
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
        out["batch_util_hist"] = _conform(
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
    filled = {name: df if df is not None else _empty(name) for name, df in out.items()}
    return {name: df for name, df in filled.items() if df is not None}


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

    def lap(step: str) -> None:
        now = time.perf_counter()
        result.seconds[step] = result.seconds.get(step, 0.0) + now - clock[0]
        clock[0] = now

    set_variables(
        con,
        {**threshold_variables(thresholds), "cluster": cluster, "as_of": as_of, HOST_NEWEST: None},
    )
    with Relations(con) as rel:
        rel.frame("analyze_batch", pl.DataFrame({"job_id": job_ids}, schema={"job_id": pl.String}))
        rel.table(
            "shared_spans",
            f"select * from read_parquet({sql_string(shared_spans)})"
            if shared_spans
            else load_sql("plan/shared_spans"),
        )
        rel.table("analyze_alloc", load_sql("staging/allocations"))
        held = con.sql("select host, start_ts, end_ts from analyze_alloc").pl()
        span = date_span(held)
        lo, hi = span if span else (as_of.date(), as_of.date())
        set_variables(con, {"date_lo": lo, "date_hi": hi})
        if data_dir is not None:
            hosts = held["host"].drop_nulls().unique().to_list()
            narrow_dated_views(con, data_dir, cluster, lo, hi, hosts)
        elif days_unbound(con):
            raise GpuwasteError(
                "run_batch was given a connection whose samples' views name no file "
                "(connect(dated=False)) and no data_dir to name them from"
            )
        _bound_running(rel, as_of, thresholds)
        result.unresolved_gpus = _resolve_unknown(rel)
        alloc_all = con.sql("select * from analyze_alloc").pl()
        ranges = HostRanges.of(alloc_all, batch_hosts, range_samples)
        if ranges.hosts:  # over the batch's hosts, first to last, and its days
            set_variables(con, {"host_lo": ranges.hosts[0], "host_hi": ranges.hosts[-1]})
            BATCH_DEVICES.run(rel, thresholds)
        lap("allocations")

        # the ranges' parts, on disk past 16 MiB: they grow with the hosts a batch reaches
        with closing(RangeParts()) as parts:
            with (
                closing(_read_ahead(con, cluster, alloc_all, ranges, data_dir)) as read,
                _beside_threads() as beside,
            ):
                for _, alloc, samples in read:
                    lap("read (waited for)")
                    parts.add(_gpu_pass(con, samples, alloc, thresholds, lap, beside))
                    lap("range parts (held, or written past 16 MiB)")
                    del samples
            batch = _roll_up_parts(parts.read(), thresholds)
            lap("range parts (held, or written past 16 MiB)")
        if "gpu_sample_stats" not in batch:  # no allocation in the batch, so no GPU
            batch[GPU_STEP.output] = _conform(pl.DataFrame(), "job_gpu_usage")
        for step in (GPU_STEP, HOST_STEP, JOB_STEP):
            if step.output in batch:
                continue
            for name in step.inputs:
                if name in batch:
                    rel.frame(name, batch[name])
            step.run(rel, thresholds)
            batch[step.output] = rel.frames[step.output]
            lap(step.output)
    result.frames = {RESULT_OF[name]: batch[name] for name in RESULT_OF}
    return result


__all__ = [
    "BATCH_STEPS",
    "GPU_STEPS",
    "JOB_STEP",
    "BatchResult",
    "Relations",
    "Step",
    "run_batch",
    "run_steps",
]
