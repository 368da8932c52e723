"""`gpuwaste analyze`: recompute the result tables for what changed, under the writer lock.

Per cluster: find the jobs whose inputs changed since the last run (their record or allocations,
a sample partition their allocation overlaps, or, for running jobs, the watermark), run the
per-job pass over them in batches of jobs by start day and, inside a batch, of hosts (bounded
memory; each host range reads only its own row groups) on an engine (this process, or Spark:
`engines/`), each batch staging its rows, replace exactly their rows in the per-job tables
(`staging.commit`), then recompute the summaries from the per-job tables and record the
state. `rebuild=True` recomputes every job and gives the same tables.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from gpuwaste.analyses import state
from gpuwaste.analyses.batch import (
    MAX_FAILED_JOBS,
    MEMORY_LIMIT,
    PLAN_FILE,
    BatchOutcome,
    BatchPlan,
    BatchSpec,
    configure_batch_connection,
    one_line,
    stable,
)
from gpuwaste.analyses.busy_power import IDLE_POWER_STEP, idle_power, idle_power_variables
from gpuwaste.analyses.engines import Engine, LocalEngine
from gpuwaste.analyses.freshness import newest_sample_ts
from gpuwaste.analyses.host_ranges import RANGE_MAX_SAMPLES
from gpuwaste.analyses.plan import (
    FINGERPRINTS_FILE,
    SHARED_SPANS_FILE,
    TOUCHED_FILE,
    Since,
    make_plan,
)
from gpuwaste.analyses.registry import (
    AFTER_PER_JOB,
    drop_staging_tables,
    make_staging_tables,
)
from gpuwaste.analyses.sqlfiles import (
    device_variables,
    failure_variables,
    set_variables,
    threshold_variables,
)
from gpuwaste.analyses.staging import FILE_KEY, commit, remove_staging, staging_dir
from gpuwaste.config import Settings
from gpuwaste.errors import DiskError, GpuwasteError, UsageError
from gpuwaste.warehouse.catalog import connect, refresh_catalog
from gpuwaste.warehouse.host_blocks import BLOCK_HOSTS
from gpuwaste.warehouse.lock import writer_lock
from gpuwaste.warehouse.results import RESULT_TABLES
from gpuwaste.warehouse.store import Warehouse

# The summaries and cluster-rows tables in the order they run, from the registry (each after
# those it reads).
SUMMARIES: dict[str, Callable[[duckdb.DuckDBPyConnection], pl.DataFrame]] = {
    a.name: a.compute for a in AFTER_PER_JOB
}
# Those that others of them read (queue_causes: queue_cause_summary, queue_idle_overlap).
READ_BY_SUMMARIES = frozenset(i for a in AFTER_PER_JOB for i in a.inputs) & set(SUMMARIES)


@dataclass
class ClusterRun:
    cluster: str
    jobs_total: int = 0
    jobs_recomputed: int = 0
    jobs_removed: int = 0
    unresolved_gpus: int = 0
    counter_set_aside: int = 0  # energy-counter increases no GPU could draw (energy.py)
    rebuilt: bool = False
    rows: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)  # wall, per step of the batches
    # CPU seconds of this process (every thread) per phase: `per_job` (the plan, the batches,
    # the commit) and each summary or cluster-rows table by name, for the benchmark
    cpu_seconds: dict[str, float] = field(default_factory=dict)
    failed_jobs: dict[str, str] = field(default_factory=dict)  # job_id -> why, one line
    error: str = ""  # why the whole cluster's analysis failed, one line ("" if it did not)
    log: Path | None = None  # where the tracebacks of failures were written

    def details(self) -> str:
        return f"details: {self.log}" if self.log else "its error log could not be written"

    def summary(self) -> str:
        if self.error:
            return f"{self.cluster}: analysis failed: {self.error} ({self.details()})"
        what = "rebuilt" if self.rebuilt else "incremental"
        line = (
            f"{self.cluster}: {self.jobs_recomputed} of {self.jobs_total} jobs recomputed "
            f"({what}), {self.jobs_removed} removed"
        )
        if self.unresolved_gpus:
            line += (
                f"; {self.unresolved_gpus} job x host allocation(s) not tied to a GPU (no whole "
                "host, scontrol capture, Jobstats summary or job label names it) skipped, counted "
                "neither busy nor idle"
            )
        if self.counter_set_aside:
            line += (
                f"; {self.counter_set_aside} energy-counter increase(s) set aside as more than "
                "twice the GPU model's power limit over their seconds (the counter ran backwards "
                "or jumped): power x seconds counted instead"
            )
        if self.failed_jobs:
            first, why = next(iter(self.failed_jobs.items()))
            line += (
                f"; {len(self.failed_jobs)} job(s) left out because their analysis failed "
                f"(job {first}: {why}; {self.details()})"
            )
        return line


def _write_log(data_dir: Path, cluster: str, errors: list[str]) -> Path | None:
    """Tracebacks of this run's failures in `analyze_state/<cluster>.errors.log` (removed when
    a run has none); None when it cannot be written (a full disk must not hide the failure the
    log was to detail behind its own)."""
    path = data_dir / state.STATE_DIR / f"{cluster}.errors.log"
    try:
        if errors:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("\n".join(errors))
        else:
            path.unlink(missing_ok=True)
    except OSError:
        path.unlink(missing_ok=True)  # not half a log
        return None
    return path


def _as_of(con: duckdb.DuckDBPyConnection, cluster: str) -> datetime:
    """How far the data of `cluster` reaches: its latest ingest watermark, else its latest
    sample, else its latest job event; never past this moment. Ingest refuses times from the
    future (`ingest.times`), so only a warehouse written before that rule, or a clock set back
    since, holds later ones: a running job is then counted up to now, not to a wrong clock's
    year (and, in a batch, up to its own host's newest sample: staging/host_newest.sql)."""
    now = datetime.now(UTC)
    for sql in (
        "select max(watermark) from ingest_state where cluster = $1",
        "select max(ts) + interval 1 microsecond from gpu_samples where cluster = $1",
        "select max(greatest(coalesce(end_ts, start_ts), start_ts)) from jobs where cluster = $1",
    ):
        row = con.execute(sql, [cluster]).fetchall()[0]
        if row and row[0] is not None:
            value: datetime = row[0]
            return min(value.astimezone(UTC), now)
    return now


# At most this many hosts' jobs per batch (by each job's first host; sql/plan/batches.sql): a
# batch's rows are held until it is staged, so a batch must not grow with the cluster. Without
# the bound a 7-day batch's peak grew with the cluster's hosts; fewer hosts per batch cost time
# (bench/RESULTS.md, "The run's own steps capped", the batches' reach). A cluster of up to 128
# hosts is one batch a week. As many as a day's block of hosts in the sample files
# (`warehouse.host_blocks`), so that a batch of neighbouring hosts names 1-2 blocks a day.
BATCH_MAX_HOSTS = BLOCK_HOSTS


def _merge_outcomes(run: ClusterRun, outcomes: list[BatchOutcome]) -> list[str]:
    """Add the batches' outcomes to `run`; returns the tracebacks of the failures."""
    errors: list[str] = []
    for o in sorted(outcomes, key=lambda o: o.index):
        run.failed_jobs.update(o.failed_jobs)
        errors.extend(o.errors)
        run.unresolved_gpus += o.unresolved_gpus
        run.counter_set_aside += o.counter_set_aside
        for step, secs in o.seconds.items():
            run.seconds[step] = run.seconds.get(step, 0.0) + secs
    return errors


def _raise_batch_failure(run: ClusterRun, outcomes: list[BatchOutcome]) -> None:
    """A batch that failed as a whole, or more than MAX_FAILED_JOBS failed jobs, fail the
    cluster (its first batch error, in one sentence)."""
    whole = [o for o in outcomes if o.error]
    if whole:
        raise (DiskError if whole[0].disk else GpuwasteError)(whole[0].error)
    if len(run.failed_jobs) > MAX_FAILED_JOBS:
        job, why = list(run.failed_jobs.items())[-1]
        raise GpuwasteError(
            f"{len(run.failed_jobs)} jobs could not be analyzed, more than {MAX_FAILED_JOBS}: "
            f"the cause is the cluster's data, not the jobs (job {job}: {why})"
        )


def _write_per_job_tables(
    data_dir: Path,
    run: ClusterRun,
    engine: Engine,
    plan: BatchPlan,
    staging: Path,
    touched: Path | None,
    memory_limit: str,
) -> None:
    """Run the batches of `plan` on `engine` (each staging its rows; jobs failing alone left
    out, in `run.failed_jobs`), then replace the rows of the jobs in the parquet file `touched`
    (recomputed or removed) in every per-job table (every row when None: a rebuild)."""
    outcomes = engine.run(plan, data_dir, staging)
    errors = _merge_outcomes(run, outcomes)
    run.log = _write_log(data_dir, run.cluster, errors)
    _raise_batch_failure(run, outcomes)
    done = sorted({o.index for o in outcomes})
    missing = sorted(set(range(plan.count)) - set(done))
    if missing:
        raise GpuwasteError(f"the engine returned no result for batch {missing[0]}")
    run.rows.update(commit(data_dir, run.cluster, staging, done, touched, memory_limit))


def _previous(
    settings: Settings,
    cluster: str,
    thresholds: str,
    schema: str,
    parts: dict[str, list[int]],
    as_of: datetime,
) -> Since | None:
    """What the last analyze of `cluster` saw, if an incremental run can build on it: recorded,
    readable, with the same thresholds and result columns (else every job is recomputed)."""
    meta = state.load_meta(settings.data_dir, cluster)
    fingerprints = state.fingerprints_file(settings.data_dir, cluster)
    if meta is None or fingerprints is None:
        return None
    if meta.thresholds != thresholds or meta.results_schema != schema:
        return None
    return Since(
        fingerprints=fingerprints,
        changed_days=sorted(state.changed_days(meta.partitions, parts)),
        as_of_moved=meta.as_of != as_of.isoformat(),
    )


def analyze_cluster(
    settings: Settings,
    cluster: str,
    *,
    rebuild: bool = False,
    since: date | None = None,
    batch_days: int = 7,
    batch_hosts: int = 8,
    range_samples: int = RANGE_MAX_SAMPLES,
    memory_limit: str = MEMORY_LIMIT,
    engine: Engine | None = None,
) -> ClusterRun:
    wh = Warehouse(settings.data_dir)
    t = settings.thresholds
    # #14: models, MIG slices, prices; #45: admin uids
    variables = {**device_variables(settings, cluster), **failure_variables(settings)}
    thresholds_json = t.model_dump_json() + json.dumps(variables, sort_keys=True)
    schema_now = state.results_schema(tuple(RESULT_TABLES))
    staging = staging_dir(settings.data_dir, cluster)
    cpu_start = time.process_time()
    try:
        with connect(settings.data_dir) as con:  # closed on an error too
            configure_batch_connection(con, memory_limit)
            set_variables(con, variables)
            as_of = _as_of(con, cluster)
            samples_until = newest_sample_ts(wh, cluster)
            parts = state.partition_signatures(wh, cluster)
            inputs = state.summary_inputs(wh, cluster)
            previous = (
                None
                if rebuild
                else _previous(settings, cluster, thresholds_json, schema_now, parts, as_of)
            )
            counts = make_plan(
                con,
                staging,
                cluster=cluster,
                as_of=as_of,
                previous=previous,
                since=since,
                batch_days=batch_days,
                max_hosts=BATCH_MAX_HOSTS,
            )
        run = ClusterRun(
            cluster=cluster,
            jobs_total=counts.jobs,
            jobs_recomputed=counts.recomputed,
            jobs_removed=counts.removed,
            rebuilt=previous is None,
        )
        jobs_changed = bool(counts.recomputed or counts.removed or run.rebuilt)
        last = state.load_meta(settings.data_dir, cluster)
        # summaries this run has already computed (over the same samples): not computed again
        computed: dict[str, pl.DataFrame] = {}
        if jobs_changed:
            started = time.perf_counter()
            with connect(settings.data_dir) as con:
                # the power arm of looks_busy: the models' idle power (not in the fingerprint)
                configure_batch_connection(con, memory_limit)
                set_variables(con, variables)
                computed["idle_power"] = idle_power(con, cluster, t)
            run.seconds[IDLE_POWER_STEP] = time.perf_counter() - started  # for the benchmark
            template = BatchSpec(
                cluster=cluster,
                thresholds=t,
                as_of=as_of,
                batch_hosts=batch_hosts,
                memory_limit=memory_limit,
                variables={**variables, **idle_power_variables(computed["idle_power"])},
                shared_spans=staging / SHARED_SPANS_FILE,
                range_samples=range_samples,
            )
            _write_per_job_tables(
                settings.data_dir,
                run,
                engine or LocalEngine(),
                BatchPlan(staging / PLAN_FILE, counts.batches, template),
                staging,
                None if run.rebuilt else staging / TOUCHED_FILE,  # rebuilt: every row
                memory_limit,
            )
        run.cpu_seconds["per_job"] = time.process_time() - cpu_start
        if jobs_changed or last is None or last.inputs != inputs:  # new job logs: summaries
            refresh_catalog(settings.data_dir)
            with connect(settings.data_dir) as con:
                # bounded as every other step: a summary over the cluster's samples spills
                con.execute(f"set memory_limit = '{memory_limit}'")
                # as_of: where a running allocation ends (queue_wait_pieces.sql's untied ones)
                set_variables(
                    con,
                    {**variables, **threshold_variables(t), "cluster": cluster, "as_of": as_of},
                )
                for name, compute in SUMMARIES.items():
                    cpu_start = time.process_time()
                    make_staging_tables(con, name)
                    rows = stable(computed[name] if name in computed else compute(con))
                    drop_staging_tables(con, name)
                    run.rows[name] = wh.replace_file(name, cluster, FILE_KEY, rows)
                    if name in READ_BY_SUMMARIES:
                        # the catalog's view was made before this run wrote the table: the
                        # summaries after it read this cluster's new rows from here
                        con.register(name, rows.with_columns(pl.lit(cluster).alias("cluster")))
                    run.cpu_seconds[name] = time.process_time() - cpu_start
        state.save(
            settings.data_dir,
            cluster,
            state.AnalyzeState(
                thresholds=thresholds_json,
                as_of=as_of.isoformat(),
                partitions=parts,
                results_schema=schema_now,
                ran_at=datetime.now(UTC).isoformat(),
                samples_until=samples_until.isoformat() if samples_until else "",
                inputs=inputs,
            ),
            staging / FINGERPRINTS_FILE,
            list(run.failed_jobs),  # failed: retried next run
        )
    finally:
        remove_staging(staging)
    return run


def analyze(
    settings: Settings,
    *,
    clusters: list[str] | None = None,
    rebuild: bool = False,
    since: date | None = None,
    batch_days: int = 7,
    batch_hosts: int = 8,
    range_samples: int = RANGE_MAX_SAMPLES,
    quiet: bool = False,
    engine: Engine | None = None,
) -> list[ClusterRun]:
    """Analyze every cluster with jobs (or only `clusters`); one writer at a time."""
    data_dir: Path = settings.data_dir
    wh = Warehouse(data_dir)
    known = wh.clusters("jobs")
    if not known:
        raise GpuwasteError(
            f"no jobs in the warehouse at {data_dir}: run `gpuwaste ingest` (or `gpuwaste demo`) "
            "first."
        )
    chosen = clusters or known
    unknown = sorted(set(chosen) - set(known))
    if unknown:
        raise GpuwasteError(
            f"no jobs for cluster '{unknown[0]}' in {data_dir} (clusters with jobs: "
            f"{', '.join(known)})."
        )
    runs: list[ClusterRun] = []
    with writer_lock(data_dir, "analyze"):
        wh.remove_temp_files(RESULT_TABLES)
        for c in chosen:
            try:
                run = _analyze_isolated(
                    settings,
                    c,
                    rebuild=rebuild,
                    since=since,
                    batch_days=batch_days,
                    batch_hosts=batch_hosts,
                    range_samples=range_samples,
                    engine=engine,
                )
            except DiskError as exc:  # every cluster after it would meet the same disk
                done = ", ".join(r.cluster for r in runs if not r.error) or "none"
                raise DiskError(
                    f"analyze stopped at cluster {c} (clusters analyzed before it: {done}): {exc}"
                ) from exc
            runs.append(run)
            if not quiet or run.error or run.failed_jobs:
                print(run.summary(), file=sys.stderr if run.error else sys.stdout)
        refresh_catalog(data_dir)
    _raise_failures(runs)
    return runs


def _analyze_isolated(settings: Settings, cluster: str, **options: Any) -> ClusterRun:
    """analyze_cluster; whatever it raises but a `DiskError` is kept in the run (`error`, and
    its traceback in the cluster's error log) so that the other clusters are still analyzed."""
    try:
        return analyze_cluster(settings, cluster, **options)
    except DiskError:
        raise  # the disk, not the cluster: `analyze` stops (its sentence says it all)
    except Exception as exc:
        log = _write_log(settings.data_dir, cluster, [traceback.format_exc()])
        return ClusterRun(cluster=cluster, error=one_line(exc), log=log)


def _raise_failures(runs: list[ClusterRun]) -> None:
    """One sentence, non-zero exit, when a cluster or any job could not be analyzed."""
    failed = [r.cluster for r in runs if r.error]
    partial = [r.cluster for r in runs if r.failed_jobs and not r.error]
    if not failed and not partial:
        return
    done = [r.cluster for r in runs if not r.error]
    parts = []
    if failed:
        parts.append(f"the analysis of cluster(s) {', '.join(failed)} failed")
    if partial:
        parts.append(f"some jobs of {', '.join(partial)} could not be analyzed")
    raise GpuwasteError(
        f"{' and '.join(parts)} (see the lines above and analyze_state/<cluster>.errors.log); "
        f"everything else is up to date (clusters analyzed: {', '.join(done) or 'none'})."
    )


def since_date(text: str | None) -> date | None:
    """`--since` as a date (YYYY-MM-DD, or an ISO timestamp), or None."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(text).date()
    except ValueError:
        raise UsageError(f"--since '{text}' is not a date such as 2026-11-01.") from None


__all__ = ["SUMMARIES", "analyze", "analyze_cluster", "since_date"]
