"""The plan of one `gpuwaste analyze` of a cluster, made in DuckDB and kept in files, so that the
driver holds nothing per job whatever the size of the warehouse.

`make_plan` writes into the run's staging folder:

- `fingerprints.parquet`: every job's fingerprint (`sql/plan/job_fingerprints.sql`), what the
  run records for the next one (`state.save`);
- `plan.parquet`: the jobs to recompute and the batch of each (`sql/plan/dirty_jobs.sql` against
  the last run's fingerprints, then `sql/plan/batches.sql`), sorted by batch; an engine reads
  one batch's job ids at a time (`batch.BatchPlan`), on this machine or on a Spark executor;
- `touched.parquet` (incremental runs): the jobs whose result rows are replaced, recomputed or
  removed (`sql/plan/removed_jobs.sql`), which `staging.commit` leaves out of the old rows;
- `shared_spans.parquet`: the cluster's allocations that overlap another on their device
  (`sql/plan/shared_spans.sql`, usually none), where every batch looks for the sharers of its
  allocations (`sql/staging/allocations.sql`) instead of joining the whole cluster's again.

DuckDB runs each query under the connection's memory limit and streams it to its file; the
driver learns only the counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path

import duckdb

from gpuwaste.analyses.batch import PLAN_FILE
from gpuwaste.analyses.sqlfiles import load_sql, set_variables
from gpuwaste.analyses.staging import count_rows
from gpuwaste.warehouse.store import atomic_copy_parquet, sql_string

FINGERPRINTS_FILE = "fingerprints.parquet"
DIRTY_FILE = "dirty.parquet"
TOUCHED_FILE = "touched.parquet"
SHARED_SPANS_FILE = "shared_spans.parquet"
# The SQL files the plan runs (tests/test_analyses_sql.py: every SQL file is run or an oracle).
SQL_FILES = (
    "plan/job_fingerprints",
    "plan/dirty_jobs",
    "plan/removed_jobs",
    "plan/batches",
    "plan/shared_spans",
)


@dataclass(frozen=True)
class Since:
    """What the last run saw, for an incremental run: its fingerprints file, the UTC days whose
    sample files changed since, and whether the data now reaches further (running jobs are
    then recomputed)."""

    fingerprints: Path
    changed_days: list[date]
    as_of_moved: bool


@dataclass(frozen=True)
class PlanCounts:
    """What the driver learns of the plan: jobs in the cluster, to recompute, removed since the
    last run, and batches."""

    jobs: int
    recomputed: int
    removed: int
    batches: int


def write_dirty(
    con: duckdb.DuckDBPyConnection,
    fingerprints: Path,
    previous: Since,
    since: date | None,
    staging: Path,
) -> tuple[Path, int, int]:
    """The jobs of `fingerprints` to recompute after the run `previous`
    (`sql/plan/dirty_jobs.sql`) into `staging`/dirty.parquet, and those jobs with the removed
    ones (`sql/plan/removed_jobs.sql`) into `staging`/touched.parquet. Returns the dirty file,
    the number of jobs in it and the number of removed jobs."""
    set_variables(
        con,
        {
            "fingerprints": str(fingerprints),
            "previous": str(previous.fingerprints),
            "changed_days": [d.isoformat() for d in previous.changed_days] or None,
            "as_of_moved": previous.as_of_moved,
            "since": since,
        },
    )
    dirty, touched = staging / DIRTY_FILE, staging / TOUCHED_FILE
    atomic_copy_parquet(con, load_sql("plan/dirty_jobs"), dirty)
    atomic_copy_parquet(
        con,
        f"select job_id from read_parquet({sql_string(dirty)}) "
        f"union all ({load_sql('plan/removed_jobs')})",
        touched,
    )
    recomputed = count_rows(con, [dirty])
    return dirty, recomputed, count_rows(con, [touched]) - recomputed


def write_batches(
    con: duckdb.DuckDBPyConnection, dirty: Path, dest: Path, batch_days: int, max_hosts: int
) -> int:
    """The batch of each job of the parquet file `dirty` (columns job_id, first_day,
    first_host) into `dest` (`sql/plan/batches.sql`); returns the number of batches."""
    set_variables(
        con, {"dirty": str(dirty), "batch_days": batch_days, "batch_max_hosts": max_hosts}
    )
    query = f"select * from ({load_sql('plan/batches')}) order by batch, job_id"
    atomic_copy_parquet(con, query, dest)  # sorted: a batch reads only its row groups
    row = con.execute(
        f"select coalesce(max(batch) + 1, 0) from read_parquet({sql_string(dest)})"
    ).fetchall()[0]
    return int(row[0])


def make_plan(
    con: duckdb.DuckDBPyConnection,
    staging: Path,
    *,
    cluster: str,
    as_of: datetime,
    previous: Since | None,
    since: date | None,
    batch_days: int,
    max_hosts: int,
) -> PlanCounts:
    """Write the run's fingerprints, plan, shared device spans and (when `previous` is given)
    touched jobs into `staging` (con: a warehouse connection); `previous` None recomputes every
    job."""
    fingerprints = staging / FINGERPRINTS_FILE
    set_variables(con, {"cluster": cluster, "as_of": as_of})
    atomic_copy_parquet(con, load_sql("plan/job_fingerprints"), fingerprints)
    jobs = count_rows(con, [fingerprints])
    dirty, recomputed, removed = fingerprints, jobs, 0
    if previous is not None:
        dirty, recomputed, removed = write_dirty(con, fingerprints, previous, since, staging)
    batches = write_batches(con, dirty, staging / PLAN_FILE, batch_days, max_hosts)
    if batches:  # an incremental run with nothing to recompute runs no batch
        atomic_copy_parquet(con, load_sql("plan/shared_spans"), staging / SHARED_SPANS_FILE)
    return PlanCounts(jobs=jobs, recomputed=recomputed, removed=removed, batches=batches)


__all__ = [
    "FINGERPRINTS_FILE",
    "SHARED_SPANS_FILE",
    "SQL_FILES",
    "TOUCHED_FILE",
    "PlanCounts",
    "Since",
    "make_plan",
    "write_batches",
    "write_dirty",
]
