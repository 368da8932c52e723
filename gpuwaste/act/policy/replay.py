"""Replay a rule over history: one query over the result tables (sql/act/), every threshold of
the sweep in the same pass (the per-job idle stretches are computed once and joined with the
thresholds): a sweep costs little more than one threshold (bench/RESULTS.md, "Replaying a
cancel rule on 1 M jobs")."""

from __future__ import annotations

import uuid
from datetime import datetime
from pathlib import Path

import duckdb
import polars as pl

from gpuwaste.act.policy.rule import Only, Rule
from gpuwaste.analyses.sqlfiles import Scalar, load_sql, set_variables
from gpuwaste.errors import GpuwasteError
from gpuwaste.warehouse.catalog import connect
from gpuwaste.warehouse.reading import read_frame, run
from gpuwaste.warehouse.results import ALL_VCS, ROLLUP_LABELS
from gpuwaste.warehouse.store import Warehouse

NEEDED = ("job_usage", "job_gpu_usage")
# The SQL files the replay runs (tests/test_analyses_sql.py checks every SQL file is run).
JOBS_SQL, HITS_SQL = "act/policy_jobs", "act/policy_hits"
TABLE_SQL, JOBS_HIT_SQL = "act/policy_replay", "act/policy_jobs_hit"
SQL_FILES = (JOBS_SQL, HITS_SQL, TABLE_SQL, JOBS_HIT_SQL)
# What a row is: of the table, and of the `--jobs` list.
KEY, JOBS_KEY = ("cluster", "idle_hours", "vc"), ("cluster", "idle_hours", "job_id")
TITLE = "Replay of the cancel rule ({jobs}{grace}{cap})"
# the jobs a rule may cancel (--only), as its title names them
ONLY_WORDS = {
    Only.all: "every job",
    Only.debugging: "debugging jobs only",
    Only.interactive: "interactive jobs only",
}


# what the table's `jobs` column counts (sql/act/policy_jobs.sql), the rule's --only aside
JOBS = "the jobs that started and held GPU time"


def title(rule: Rule) -> str:
    """The replay's title: the jobs it may cancel, the grace period (if any) and the cap on
    interactive jobs (if any), in words."""
    grace = f", after a grace of {rule.grace_minutes:g} min" if rule.grace_minutes else ""
    cap = (
        ""
        if rule.max_interactive_hours is None
        else f", interactive jobs at most {rule.max_interactive_hours:g} h"
    )
    return TITLE.format(jobs=ONLY_WORDS[rule.only], grace=grace, cap=cap)


def replay_sql(final: str, hits: str | None = None) -> str:
    """The jobs the rule considers and its hits as named relations, then `final` over them;
    `hits`: a table holding the hits already computed (replay_with_jobs), read instead."""
    found = load_sql(HITS_SQL) if hits is None else f"select * from {hits}"
    return (
        f"with policy_jobs as ({load_sql(JOBS_SQL)}),\n"
        f"policy_hits as ({found})\n"
        f"select * from ({final})"
    )


def _variables(
    rule: Rule,
    cluster: str | None,
    since: datetime | None,
    until: datetime | None,
    count_looks_busy: bool = False,
) -> dict[str, Scalar]:
    return {
        **ROLLUP_LABELS,
        "cluster": cluster,
        "period_start": since,
        "period_end": until,
        "only_jobs": rule.only.value,
        "idle_hours": list(rule.idle_hours),
        "grace_s": rule.grace_s,
        "max_interactive_s": rule.max_interactive_s,
        "count_looks_busy": count_looks_busy,
    }


def replay(
    con: duckdb.DuckDBPyConnection,
    rule: Rule,
    *,
    cluster: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    jobs: bool = False,
    count_looks_busy: bool = False,
) -> pl.DataFrame:
    """Per cluster x threshold x VC ('(all)' first): jobs, GPU hours, jobs hit, GPU hours
    reclaimed, wrongful hits and the GPU hours of work they lose. With `jobs`: one row per
    threshold x job the rule would have cancelled (its user, VC, GPUs, start and end, the cancel
    point and why, GPU hours reclaimed, wrongful or not, work lost). `count_looks_busy`: jobs
    that look busy are idle over their whole allocation (`--count-looks-busy`), their cancels'
    reason `looks busy (counted idle)`."""
    set_variables(con, _variables(rule, cluster, since, until, count_looks_busy))
    if jobs:
        return _jobs_hit(con)
    return _table(con)


def _table(con: duckdb.DuckDBPyConnection, hits: str | None = None) -> pl.DataFrame:
    df = read_frame(con, replay_sql(load_sql(TABLE_SQL), hits))
    return df.sort(
        ["cluster", "idle_hours", pl.col("vc") == ALL_VCS, "vc"],
        descending=[False, False, True, False],
    )


def _jobs_hit(con: duckdb.DuckDBPyConnection, hits: str | None = None) -> pl.DataFrame:
    df = read_frame(con, replay_sql(load_sql(JOBS_HIT_SQL), hits))
    return df.sort(["cluster", "idle_hours", "cancel_ts", "job_id"])


def replay_with_jobs(
    con: duckdb.DuckDBPyConnection,
    rule: Rule,
    *,
    cluster: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """`replay`'s table and its jobs list (`jobs=True`, every threshold), the same frames, from
    one pass: the hits, the costly part, are computed once into a temporary table of `con` (its
    own: a cursor's temporary tables are not seen by the others) that both read."""
    set_variables(con, _variables(rule, cluster, since, until))
    hits = f"policy_hits_{uuid.uuid4().hex}"
    run(con, f"create temporary table {hits} as {replay_sql('select * from policy_hits')}")
    try:
        return _table(con, hits), _jobs_hit(con, hits)
    finally:
        run(con, f"drop table if exists {hits}")


def open_warehouse(data_dir: Path, cluster: str | None) -> duckdb.DuckDBPyConnection:
    """A connection to an analyzed warehouse; a missing analysis or unknown cluster is refused."""
    wh = Warehouse(data_dir)
    for name in NEEDED:
        if not wh.has_files(name):
            raise GpuwasteError(f"no {name} table in {data_dir}: run `gpuwaste analyze` first.")
    known = wh.clusters("job_usage")
    if cluster is not None and cluster not in known:
        raise GpuwasteError(
            f"no analyzed jobs for cluster '{cluster}' in {data_dir} (clusters: {', '.join(known)})."
        )
    return connect(data_dir)


def jobs_counted(rule: Rule) -> str:
    """What the table's `jobs` column counts, in words: JOBS, and the rule's --only."""
    return JOBS if rule.only == Only.all else f"{JOBS} ({ONLY_WORDS[rule.only]})"


__all__ = [
    "JOBS_KEY",
    "KEY",
    "SQL_FILES",
    "jobs_counted",
    "open_warehouse",
    "replay",
    "replay_with_jobs",
    "title",
]
