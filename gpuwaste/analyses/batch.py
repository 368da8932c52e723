"""One batch of the per-job pass, the unit every engine runs: `compute_batch(spec, data_dir)`.

A `BatchSpec` names a cluster, the jobs of one batch and the settings of the pass; it is small
and picklable, so it travels to a Spark executor as easily as to a loop in this process. The
driver does not make the specs: it writes the plan (`plan.make_plan`: every job to recompute and
its batch, in a parquet file of the staging folder), and an engine makes each batch's spec from
it when the batch runs (`BatchPlan.spec`), so no process holds the job ids of more than one
batch. `compute_batch` opens its own connection to the warehouse at
`data_dir`, runs `per_job.run_batch` over the jobs (a job whose analysis fails alone is left
out, the rest are analyzed), and returns every per-job result table of the batch as Arrow
tables, floats rounded. `stage_batch` writes those tables into a staging folder, one file per
table and batch, atomically and under a name fixed by the batch (a retried batch overwrites its
own files with the same rows), and returns the small `BatchOutcome` the driver collects. There is
no other definition of the per-job results: the local engine and Spark both call these two.
"""

from __future__ import annotations

import json
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pyarrow as pa

from gpuwaste.analyses.host_ranges import RANGE_MAX_SAMPLES
from gpuwaste.analyses.per_job import BatchResult, run_batch
from gpuwaste.analyses.registry import PER_JOB_TABLES
from gpuwaste.analyses.sqlfiles import Scalar, set_variables
from gpuwaste.config import Thresholds
from gpuwaste.errors import DamagedFileError, DiskError, GpuwasteError, MachineError
from gpuwaste.warehouse.catalog import connect
from gpuwaste.warehouse.store import atomic_write_parquet

# Floats are written rounded to this many decimals: parallel aggregation sums in varying order,
# and without rounding a rebuild could differ from an incremental run in the 14th digit.
DECIMALS = 6
# More jobs than this failing alone in one cluster: the cause is not the jobs, the cluster fails.
MAX_FAILED_JOBS = 20
# The plan of a run in its staging folder: one row (batch, job_id) per job to recompute.
PLAN_FILE = "plan.parquet"
# DuckDB's memory limit on every connection of `analyze` (the plan, each batch, the commit, the
# summaries); past it DuckDB spills to the connection's temporary folder. The batches use little
# of it (their samples are reduced in polars and numpy); the per-run steps grow with the
# warehouse up to it: with a higher limit the commit and the summaries set the run's peak, above
# every batch's, at the largest size measured; with this one they stay under the batches' peak
# at every size, spilling for a few percent more time (bench/RESULTS.md, "The run's own steps
# capped").
MEMORY_LIMIT = "512MB"


@dataclass(frozen=True)
class BatchSpec:
    """What one batch computes: jobs `job_ids` of `cluster`, with the pass's settings."""

    cluster: str
    thresholds: Thresholds
    as_of: datetime  # how far the cluster's data reaches
    index: int = 0
    job_ids: tuple[str, ...] = ()
    batch_hosts: int = 8
    memory_limit: str = MEMORY_LIMIT
    # the cluster's device variables (sqlfiles.device_variables); not hashed: a dict
    variables: dict[str, Scalar] = field(default_factory=dict, hash=False)
    shared_spans: Path | None = None  # the plan's shared device spans (parquet); None: per batch
    range_samples: int = RANGE_MAX_SAMPLES  # a host range's samples, at most (foreseen)


@dataclass(frozen=True)
class BatchPlan:
    """The batches of one run: `count` batches, whose job ids are in the plan file `file`
    (sorted by batch), each with the settings of `template` (a spec without jobs)."""

    file: Path
    count: int
    template: BatchSpec

    def spec(self, index: int) -> BatchSpec:
        """The spec of batch `index` (`planned_spec`)."""
        return planned_spec(self.file, self.template, index)


def planned_spec(file: Path, template: BatchSpec, index: int) -> BatchSpec:
    """The spec of batch `index`: `template` with the job ids the plan file `file` gives the
    batch (only that batch's row groups are read: the file is sorted by batch)."""
    ids = pl.scan_parquet(file).filter(pl.col("batch") == index).collect()["job_id"]
    return replace(template, index=index, job_ids=tuple(ids.to_list()))


@dataclass
class BatchOutcome:
    """What the driver learns of one batch (its rows stay in the staging files)."""

    index: int
    rows: dict[str, int] = field(default_factory=dict)
    failed_jobs: dict[str, str] = field(default_factory=dict)  # job_id -> why, one line
    errors: list[str] = field(default_factory=list)  # tracebacks of the failed jobs
    unresolved_gpus: int = 0
    counter_set_aside: int = 0  # energy-counter increases set aside (analyses/energy.py)
    seconds: dict[str, float] = field(default_factory=dict)
    error: str = ""  # why the whole batch failed, one sentence ("" if it did not)
    disk: bool = False  # the error is a disk that refused a write (`DiskError`): the run stops

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> BatchOutcome:
        return cls(**json.loads(text))


def one_line(exc: BaseException) -> str:
    """An exception as one line: the operator's sentence, or the type and first line."""
    if isinstance(exc, GpuwasteError):
        return str(exc)
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first}"


def stable(df: pl.DataFrame) -> pl.DataFrame:
    """`df` with its floats rounded to DECIMALS."""
    return df.with_columns(pl.col(pl.Float64).round(DECIMALS))


def run_isolating(
    run: Callable[[list[str]], BatchResult],
    ids: list[str],
    failed: dict[str, str],
    errors: list[str],
) -> list[BatchResult]:
    """`run(ids)`; if it raises, the halves are run apart until the jobs that fail alone are
    found: they are left out (in `failed`, tracebacks in `errors`) and every other job is
    analyzed. More than MAX_FAILED_JOBS failures: the last one is raised. A `MachineError` or a
    `DamagedFileError` is raised at once: the batch fails as a whole."""
    try:
        return [run(ids)]
    except (MachineError, DamagedFileError):
        raise  # not the jobs: trying them apart would fail the same way
    except Exception as exc:
        if len(ids) == 1:
            failed[ids[0]] = one_line(exc)
            errors.append(f"job {ids[0]}:\n{traceback.format_exc()}")
            if len(failed) > MAX_FAILED_JOBS:
                raise
            return []
        mid = len(ids) // 2
        return run_isolating(run, ids[:mid], failed, errors) + run_isolating(
            run, ids[mid:], failed, errors
        )


def configure_batch_connection(con: duckdb.DuckDBPyConnection, memory_limit: str) -> None:
    """The settings of a batch's connection: DuckDB's `memory_limit`, no insertion order kept,
    and the parquet footers kept in memory. A batch reads the same day files of the samples again
    and again (its batch-wide steps, and each host range the blocks of its hosts: in a cluster
    of up to 128 hosts, the same day files); without the cache DuckDB parses a footer again for
    each read, a cost that grows with the files' row groups and with the number of host ranges
    (most of a range's `device_models` query at 8x: docs/history/bench-analyze.md, "Parquet
    footers kept per batch"). DuckDB checks a cached footer against the
    file's modification time (and trusts no file modified in the last 10 s), so a partition
    replaced during the run is read anew (tests/test_batch_connection.py)."""
    con.execute(f"set memory_limit = '{memory_limit}'")
    con.execute("set preserve_insertion_order = false")
    con.execute("set parquet_metadata_cache = true")


def compute_batch(spec: BatchSpec, data_dir: Path) -> tuple[dict[str, pa.Table], BatchOutcome]:
    """Every per-job result table of the batch `spec` over the warehouse at `data_dir`, as Arrow
    tables (floats rounded), and what the batch reports (failed jobs, time per step)."""
    outcome = BatchOutcome(index=spec.index)
    with connect(data_dir, dated=False) as con:  # run_batch names the days it reads
        configure_batch_connection(con, spec.memory_limit)
        set_variables(con, spec.variables)

        def run(ids: list[str]) -> BatchResult:
            return run_batch(
                con,
                spec.cluster,
                ids,
                thresholds=spec.thresholds,
                as_of=spec.as_of,
                batch_hosts=spec.batch_hosts,
                shared_spans=spec.shared_spans,
                range_samples=spec.range_samples,
                data_dir=data_dir,
            )

        result = BatchResult()
        for part in run_isolating(run, list(spec.job_ids), outcome.failed_jobs, outcome.errors):
            result.add(part)
    outcome.unresolved_gpus = result.unresolved_gpus
    outcome.counter_set_aside = result.counter_set_aside
    outcome.seconds = result.seconds
    tables: dict[str, pa.Table] = {}
    for name in PER_JOB_TABLES:
        combined = result.combined(name)
        if combined is not None:
            tables[name] = stable(combined).to_arrow()
            outcome.rows[name] = combined.height
    return tables, outcome


def staged_file(staging: Path, name: str, index: int) -> Path:
    """Where batch `index` stages its rows of table `name`."""
    return staging / name / f"batch-{index:06d}.parquet"


def stage_batch(spec: BatchSpec, data_dir: Path, staging: Path) -> BatchOutcome:
    """`compute_batch`, its tables written to `staging` (one file per table, replaced
    atomically); a failure of the whole batch is returned in `error`, not raised, so that the
    driver can say it in one sentence."""
    try:
        tables, outcome = compute_batch(spec, data_dir)
        for name, arrow in tables.items():
            frame = pl.from_arrow(arrow)
            assert isinstance(frame, pl.DataFrame)
            atomic_write_parquet(frame, staged_file(staging, name, spec.index))
    except Exception as exc:
        disk = isinstance(exc, DiskError)
        return BatchOutcome(
            index=spec.index,
            error=one_line(exc),
            # a disk that refused a write: its sentence says it all, and no traceback log is
            # written on the full disk (as for a cluster's DiskError in analyses/run.py)
            errors=[] if disk else [traceback.format_exc()],
            disk=disk,
        )
    return outcome


def spec_fields(spec: BatchSpec) -> dict[str, Any]:
    """The spec without its job ids (what every batch of one run shares)."""
    fields = asdict(spec)
    fields.pop("job_ids")
    fields.pop("index")
    return fields


__all__ = [
    "MAX_FAILED_JOBS",
    "MEMORY_LIMIT",
    "PLAN_FILE",
    "BatchOutcome",
    "BatchPlan",
    "BatchSpec",
    "compute_batch",
    "configure_batch_connection",
    "one_line",
    "planned_spec",
    "run_isolating",
    "stable",
    "stage_batch",
    "staged_file",
]
