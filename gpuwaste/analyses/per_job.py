"""The per-job pass: for a batch of jobs, one window scan of their samples, then every per-job
result table (job_gpu_usage, idle_slots, stable_phases, job_util_hist, job_usage).

Each per-job result is a pure function of one job's records and samples, so jobs are processed in
batches (by start day), and inside a batch the per-GPU pass runs over a range of hosts at a time
(sample files are sorted by host, so a range reads only its row groups): memory is bounded by
hosts x days, and a re-run of a job replaces exactly its rows.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime

import duckdb
import polars as pl

from gpuwaste.analyses import (
    idle_slots,
    job_gpu_usage,
    job_samples,
    job_usage,
    job_util_hist,
    sample_flags,
    stable_phases,
)
from gpuwaste.analyses.sqlfiles import load_sql, set_variables, threshold_variables
from gpuwaste.config import Thresholds
from gpuwaste.warehouse.schema import conform, table

PER_JOB_TABLES = ("job_gpu_usage", "idle_slots", "stable_phases", "job_util_hist", "job_usage")


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


def _date_range(con: duckdb.DuckDBPyConnection) -> tuple[date, date] | None:
    row = con.execute(
        "select min(start_ts)::date, max(end_ts - interval 1 microsecond)::date from analyze_alloc"
    ).fetchall()[0]
    if row is None or row[0] is None:
        return None
    return row[0], row[1]


def _resolve_unknown(con: duckdb.DuckDBPyConnection) -> int:
    """Replace allocations with GPU index -1 by the GPUs whose samples carry the job's label."""
    unknown = con.execute("select count(*) from analyze_alloc where gpu < 0").fetchall()[0]
    if not unknown or not unknown[0]:
        return 0
    resolved = con.sql(load_sql("staging/resolve_unknown_gpus")).pl()
    con.register("resolved_gpus", resolved)
    missing = con.execute(
        "select count(*) from analyze_alloc u where gpu < 0 and not exists "
        "(select 1 from resolved_gpus r where r.job_id = u.job_id and r.attempt = u.attempt "
        "and r.host = u.host)"
    ).fetchall()[0]
    con.execute(
        "create or replace temp table analyze_alloc as "
        "select row_number() over (order by job_id, attempt, host, gpu) as alloc_id, * from ("
        "select job_id, attempt, host, gpu, start_ts, end_ts from analyze_alloc where gpu >= 0 "
        "union select job_id, attempt, host, gpu, start_ts, end_ts from resolved_gpus)"
    )
    con.unregister("resolved_gpus")
    return int(missing[0]) if missing else 0


def _table(con: duckdb.DuckDBPyConnection, name: str, sql_name: str, kind: str = "table") -> None:
    con.execute(f"create or replace temp {kind} {name} as {load_sql(sql_name)}")


def _host_chunks(con: duckdb.DuckDBPyConnection, batch_hosts: int) -> list[tuple[str, str]]:
    """Contiguous ranges of the batch's hosts, `batch_hosts` hosts each (sample files are sorted
    by host, so a host range reads only its own row groups)."""
    hosts = [
        r[0]
        for r in con.execute("select distinct host from analyze_alloc_all order by host").fetchall()
    ]
    return [
        (hosts[i], hosts[min(i + batch_hosts, len(hosts)) - 1])
        for i in range(0, len(hosts), batch_hosts)
    ]


def _gpu_pass(
    con: duckdb.DuckDBPyConnection,
    thresholds: Thresholds,
    lap: Callable[[str], None],
) -> dict[str, pl.DataFrame]:
    """The per-GPU tables for the allocations in `analyze_alloc` (one host range)."""
    span = _date_range(con)
    if span is None:
        return {}
    set_variables(con, {"date_lo": span[0], "date_hi": span[1]})
    alloc = con.sql(
        "select alloc_id, job_id, attempt, host, gpu, start_ts, end_ts from analyze_alloc"
    ).pl()
    samples = job_samples.compute(
        con, alloc, thresholds.idle_mem_floor_mib, thresholds.fluctuation_window_s
    )
    con.register("job_samples", samples)
    lap("window pass")
    flags = sample_flags.compute(samples, thresholds)
    con.register("sample_flags", flags)
    lap("flags")
    _table(con, "gpu_sample_stats", "staging/gpu_sample_stats")
    lap("gpu stats")
    slots = _conform(idle_slots.compute(con), "idle_slots")
    lap("idle slots")
    runs = stable_phases.level_runs_frame(flags, thresholds)
    lap("memory runs")
    phases = _conform(stable_phases.merge_phases(runs, alloc, thresholds), "stable_phases")
    lap("phase merge")
    _table(con, "util_minutes", "staging/util_minutes")
    lap("util_minutes")
    checkpoint = con.sql(load_sql("staging/job_checkpoint")).pl()
    lap("checkpoint")
    con.unregister("sample_flags")
    con.unregister("job_samples")
    del samples, flags
    hist = job_util_hist.compute(con)
    fluct = con.sql(load_sql("staging/job_fluctuation")).pl()
    con.execute("drop table util_minutes")
    lap("minutes")
    con.register("batch_idle_slots", slots)
    con.register("batch_phase_counts", stable_phases.phase_counts(phases))
    gpu_usage = _conform(job_gpu_usage.compute(con), "job_gpu_usage")
    host_usage = con.sql(load_sql("staging/job_host_usage")).pl()
    con.unregister("batch_idle_slots")
    con.unregister("batch_phase_counts")
    con.execute("drop table gpu_sample_stats")
    lap("gpu roll-up")
    return {
        "job_gpu_usage": gpu_usage,
        "idle_slots": slots,
        "stable_phases": phases,
        "hist": hist,
        "fluct": fluct,
        "checkpoint": checkpoint,
        "host_usage": host_usage,
    }


def run_batch(
    con: duckdb.DuckDBPyConnection,
    cluster: str,
    job_ids: list[str],
    thresholds: Thresholds,
    as_of: datetime,
    batch_hosts: int = 8,
) -> BatchResult:
    """Every per-job table for `job_ids` of `cluster` (con: a warehouse connection).

    The per-GPU pass runs over `batch_hosts` hosts at a time (each reads only its hosts' row
    groups), then the jobs are rolled up once from the per-GPU rows of all hosts.
    """
    result = BatchResult()
    clock = [time.perf_counter()]

    def lap(step: str) -> None:
        now = time.perf_counter()
        result.seconds[step] = result.seconds.get(step, 0.0) + now - clock[0]
        clock[0] = now

    set_variables(con, {**threshold_variables(thresholds), "cluster": cluster, "as_of": as_of})
    con.register("analyze_batch", pl.DataFrame({"job_id": job_ids}, schema={"job_id": pl.String}))
    _table(con, "analyze_alloc", "staging/allocations")
    span = _date_range(con)
    lo, hi = span if span else (as_of.date(), as_of.date())
    set_variables(con, {"date_lo": lo, "date_hi": hi})
    result.unresolved_gpus = _resolve_unknown(con)
    con.execute("create or replace temp table analyze_alloc_all as select * from analyze_alloc")
    lap("allocations")

    parts: dict[str, list[pl.DataFrame]] = {}
    for host_lo, host_hi in _host_chunks(con, batch_hosts):
        set_variables(con, {"host_lo": host_lo, "host_hi": host_hi})
        con.execute(
            "create or replace temp table analyze_alloc as select * from analyze_alloc_all "
            "where host between getvariable('host_lo') and getvariable('host_hi')"
        )
        for name, df in _gpu_pass(con, thresholds, lap).items():
            parts.setdefault(name, []).append(df)
    con.execute("create or replace temp table analyze_alloc as select * from analyze_alloc_all")

    def combined(name: str, table_name: str | None = None) -> pl.DataFrame:
        frames = parts.get(name, [])
        if frames:
            return pl.concat(frames, how="vertical_relaxed")
        return _conform(pl.DataFrame(), table_name) if table_name else pl.DataFrame()

    gpu_usage = combined("job_gpu_usage", "job_gpu_usage")
    slots = combined("idle_slots", "idle_slots")
    phases = combined("stable_phases", "stable_phases")
    hist_parts = combined("hist")
    hist = _conform(
        hist_parts.group_by("job_id", "bucket").agg(pl.col("gpu_minutes").sum())
        if hist_parts.height
        else pl.DataFrame(),
        "job_util_hist",
    )
    fluct_parts = combined("fluct")
    share = thresholds.fluctuation_job_share
    fluct = (
        fluct_parts.group_by("job_id")
        .agg(pl.col("windows").sum(), pl.col("fluctuating_windows").sum())
        .with_columns(
            (pl.col("fluctuating_windows") > share * pl.col("windows")).alias("fluctuating")
        )
        if fluct_parts.height
        else pl.DataFrame(
            schema={
                "job_id": pl.String,
                "windows": pl.Int64,
                "fluctuating_windows": pl.Int64,
                "fluctuating": pl.Boolean,
            }
        )
    )
    ckpt_parts = combined("checkpoint")
    checkpoint = (
        ckpt_parts.group_by("job_id").agg(pl.col("checkpointing_gpus").sum())
        if ckpt_parts.height
        else pl.DataFrame(schema={"job_id": pl.String, "checkpointing_gpus": pl.Int64})
    )
    host_parts = combined("host_usage")
    host_usage = (
        host_parts
        if host_parts.height
        else pl.DataFrame(
            schema={
                "job_id": pl.String,
                "host": pl.String,
                "cpu_mean": pl.Float64,
                "cpu_max": pl.Float64,
                "mem_mean": pl.Float64,
                "mem_max": pl.Float64,
            }
        )
    )

    con.register("batch_idle_slots", slots)
    con.register("batch_gpu_usage", gpu_usage)
    con.register("batch_host_usage", host_usage)
    con.register("batch_fluctuation", fluct)
    con.register("batch_checkpoint", checkpoint)
    con.register("batch_phases", phases)
    jobs = _conform(job_usage.compute(con), "job_usage")
    for name in (
        "batch_idle_slots",
        "batch_gpu_usage",
        "batch_host_usage",
        "batch_fluctuation",
        "batch_checkpoint",
        "batch_phases",
        "analyze_batch",
    ):
        con.unregister(name)
    lap("job roll-up")
    result.frames = {
        "job_gpu_usage": gpu_usage,
        "idle_slots": slots,
        "stable_phases": phases,
        "job_util_hist": hist,
        "job_usage": jobs,
    }
    return result
