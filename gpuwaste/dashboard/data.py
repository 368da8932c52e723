"""The dashboard's one way to the data: a cached read-only DuckDB connection, polars frames out.

The connection comes from gpuwaste.warehouse.readonly.read_only_connection (in-memory views over
the parquet, no file access outside the warehouse), so `gpuwaste ingest` and `gpuwaste analyze`
can write while the dashboard is open. It is cached per (data dir, warehouse version): the version
changes when a table gains or loses files or a result file is rewritten, which also expires the
cached query results. Each query runs on its own cursor, so concurrent sessions do not share a
result set.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import streamlit as st

from gpuwaste.act.policy import replay as policy_replay
from gpuwaste.act.policy.rule import Rule, make_rule
from gpuwaste.analyses import freshness, reads
from gpuwaste.config import (
    DATA_DIR_ENV,
    DEFAULT_DATA_DIR,
    ExporterSettings,
    SqlSettings,
    load_settings,
)
from gpuwaste.dashboard import queries
from gpuwaste.dashboard.filters import Filters
from gpuwaste.errors import GpuwasteError
from gpuwaste.warehouse.readonly import read_only_connection
from gpuwaste.warehouse.schema import all_tables
from gpuwaste.warehouse.store import TMP_MARK, Warehouse

# the modules whose queries the dashboard runs: `fetch`'s (the dashboard's own, and those it
# shares) and the Policies page's replay (`replay`)
QUERY_MODULES = {m.__name__: m for m in (queries, reads, policy_replay)}
# the Policies page's rule as it opens: these idle thresholds (hours), no grace, every job, no cap
POLICY_HOURS = "0.5,1,2,4,8"

RUN_DEMO = "`gpuwaste demo` (bundled sample data)"
RUN_INGEST = "`gpuwaste ingest`"
RUN_ANALYZE = "`gpuwaste analyze`"


def data_dir() -> Path:
    """The warehouse folder: $GPUWASTE_DATA_DIR (set by `gpuwaste dashboard`), else the config."""
    env = os.environ.get(DATA_DIR_ENV)
    if env:
        return Path(env)
    try:
        return load_settings().data_dir
    except GpuwasteError:
        return DEFAULT_DATA_DIR


def sql_settings() -> SqlSettings:
    """The SQL page's bounds: `[sql]` of the configuration ($GPUWASTE_CONFIG, set by `gpuwaste
    dashboard --config`), else the defaults."""
    try:
        return load_settings().sql
    except GpuwasteError:
        return SqlSettings()


def _any_file(base: Path) -> Path | None:
    for p in base.glob("**/*.parquet"):
        if TMP_MARK not in p.name:
            return p
    return None


def warehouse_version(root: Path) -> tuple[tuple[str, float], ...]:
    """Which tables have files, and when each result / bookkeeping table was last rewritten."""
    wh = Warehouse(root)
    out: list[tuple[str, float]] = []
    for name, t in sorted(all_tables().items()):
        base = wh.table_dir(name)
        if not base.is_dir():
            continue
        if t.layout == "dated":
            if _any_file(base) is not None:
                out.append((name, 0.0))
            continue
        files = [p for p in base.glob("*/*.parquet") if TMP_MARK not in p.name]
        if files:
            out.append((name, max(p.stat().st_mtime for p in files)))
    return tuple(out)


@st.cache_data(ttl=5, show_spinner=False)
def _version(root: str) -> tuple[tuple[str, float], ...]:
    """warehouse_version, looked at no more than every 5 s."""
    return warehouse_version(Path(root))


def update_interval_s() -> float:
    """How often ingest and analyze are scheduled ([exporter] update_interval_s of the
    configuration, else its default): data older than a few of these are late."""
    try:
        return load_settings().exporter.update_interval_s
    except GpuwasteError:
        return ExporterSettings().update_interval_s


@dataclass(frozen=True)
class Status:
    """Whether the pages can draw, and if not, what the operator should run."""

    ok: bool
    message: str = ""


def status(root: Path, version: tuple[tuple[str, float], ...]) -> Status:
    have = {name for name, _ in version}
    if not root.is_dir():
        return Status(
            False,
            f"No warehouse at {root}. Run {RUN_DEMO} to try it, or {RUN_INGEST} then "
            f"{RUN_ANALYZE} for your cluster; then reload this page.",
        )
    if "job_usage" not in have:
        facts = sorted(have & {"gpu_samples", "jobs", "host_samples", "job_gpus"})
        if facts:
            return Status(
                False,
                f"The warehouse at {root} has ingested data ({', '.join(facts)}) but no results "
                f"yet: run {RUN_ANALYZE}, then reload this page.",
            )
        return Status(
            False,
            f"The warehouse at {root} is empty. Run {RUN_DEMO}, or {RUN_INGEST} then "
            f"{RUN_ANALYZE}; then reload this page.",
        )
    return Status(True)


@st.cache_resource(max_entries=4, show_spinner=False)
def _connection(root: str, version: tuple[tuple[str, float], ...]) -> duckdb.DuckDBPyConnection:
    return read_only_connection(Path(root))


def connection() -> duckdb.DuckDBPyConnection:
    """A fresh cursor on the cached read-only connection (close it when done)."""
    root = data_dir()
    return _connection(str(root), _version(str(root))).cursor()


@st.cache_data(ttl=600, max_entries=512, show_spinner=False)
def _cached(
    root: str,
    version: tuple[tuple[str, float], ...],
    module: str,
    name: str,
    args: tuple[Any, ...],
) -> pl.DataFrame:
    fn: Callable[..., pl.DataFrame] = getattr(QUERY_MODULES[module], name)
    cur = _connection(root, version).cursor()
    try:
        return fn(cur, *args)
    finally:
        cur.close()


class PageRuns:
    """How many page runs (visitors' scripts) are in progress in this process, and when the last
    one ended. The start-up warm-up waits, before each query it runs for pages other than the
    Overview, until none has run for `quiet_s` (the browser draws a page for a second or two
    after its run ends: bench/RESULTS.md, "Dashboard on 1 M jobs"), so that a visitor's page
    does not share the CPU with queries for pages it does not show; a visitor's page runs what
    it needs itself (or waits for the query the warm-up is running, which Streamlit computes
    once). `waiting`: how many threads wait (for tests)."""

    def __init__(self, quiet_s: float = 2.0) -> None:
        self.quiet_s = quiet_s
        self.waiting = 0
        self._n = 0
        self._ended = float("-inf")  # time.monotonic() when the last run ended
        self._changed = threading.Condition()

    @contextmanager
    def running(self) -> Iterator[None]:
        """Around a page run (app.py)."""
        with self._changed:
            self._n += 1
        try:
            yield
        finally:
            with self._changed:
                self._n -= 1
                self._ended = time.monotonic()
                self._changed.notify_all()

    def ended_now(self) -> None:
        """Count now as the end of a page run. The warm-up calls it once the Overview's queries
        are filled: the first visitor of a just-started server has connected by then but its
        page has not run yet (its browser is still loading the app), and the next queries, for
        other pages, would share the CPU with that page's run and drawing
        (bench/RESULTS.md, "Dashboard on 1 M jobs")."""
        with self._changed:
            self._ended = max(self._ended, time.monotonic())
            self._changed.notify_all()

    def wait_for_quiet(self) -> None:
        with self._changed:
            self.waiting += 1
            try:
                while True:
                    left = self._ended + self.quiet_s - time.monotonic()
                    if self._n == 0 and left <= 0:
                        return
                    self._changed.wait(timeout=None if self._n else left)
            finally:
                self.waiting -= 1


PAGE_RUNS = PageRuns()
_warming = threading.local()  # `active` in the thread running `warm`, past the Overview


def _after_page_runs() -> None:
    """In the warm-up past the Overview: wait until no visitor's page has run for a while."""
    if getattr(_warming, "active", False):
        PAGE_RUNS.wait_for_quiet()


def fetch(fn: Callable[..., pl.DataFrame], *args: Any) -> pl.DataFrame:
    """Run `fn(cursor, *args)`, a query of `queries` or `gpuwaste.analyses.reads`, with its
    result cached until the warehouse changes. In the warm-up past the Overview, once no page
    has run for a while (`PAGE_RUNS`)."""
    _after_page_runs()
    root = data_dir()
    return _cached(str(root), _version(str(root)), fn.__module__, fn.__name__, args)


@st.cache_data(ttl=600, max_entries=16, show_spinner="Replaying the rule...")
def _replay(
    root: str, version: tuple[tuple[str, float], ...], rule: Rule, f: Filters
) -> tuple[pl.DataFrame, pl.DataFrame]:
    cur = _connection(root, version).cursor()
    try:  # the module's attribute, so that bench/harness/timed_server.py times it as a query
        return policy_replay.replay_with_jobs(
            cur, rule, cluster=f.cluster, since=f.period_start, until=f.period_end
        )
    finally:
        cur.close()


def replay(rule: Rule, f: Filters) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The Policies page's replay of `rule` over view `f`'s cluster and period (its other
    filters apply on the page): the table per threshold and VC, and the jobs cancelled at every
    threshold, from one pass (gpuwaste.act.policy.replay.replay_with_jobs), cached until the
    warehouse changes."""
    _after_page_runs()
    root = data_dir()
    view = Filters(cluster=f.cluster, start=f.start, end=f.end)  # one entry whatever else is set
    return _replay(str(root), _version(str(root)), rule, view)


def overview(f: Filters) -> dict[str, pl.DataFrame]:
    """The Overview's frames for view `f` (its page draws them; `warm` fetches them ahead).
    Without a user, size or state filter the totals and the energy come from the daily summaries
    (waste_daily, energy_daily: a few rows per day); with one, from the GPU rows of the jobs in
    view (queries.job_gpu_hours, every GPU row of every job: the heaviest query of the page on
    1 M jobs, bench/RESULTS.md "Dashboard on 1 M jobs"), which the daily summaries cannot narrow
    to. `waited` is widgets.waited_behind_idle's figure."""
    per_job = bool(f.user or f.sizes or f.states)
    totals = fetch(queries.job_gpu_hours if per_job else queries.gpu_hours, f)
    return {
        "totals": totals,
        "energy": totals if per_job else fetch(queries.energy_totals, f),
        "counts": fetch(queries.job_counts, f),
        "daily": fetch(queries.gpu_hours_daily, f),
        "users": fetch(queries.top_users, f),
        "vcs": fetch(queries.top_vcs, f),
        "jobs": fetch(queries.top_jobs, f),
        "sources": fetch(reads.source_states, f.cluster),
        "reasons": fetch(queries.quarantine_reasons, f),
        "unresolved": fetch(queries.unresolved_gpu_hours, f),
        "waited": fetch(queries.queue_idle_total, f),
    }


def queue(
    f: Filters, reason: str | None = None, only: tuple[str, ...] | None = None
) -> dict[str, pl.DataFrame]:
    """The Queue and failures page's frames for view `f`, its failed attempts of `reason` (None:
    every reason, as the page opens): Table 2, the waits behind idle GPUs per day and per holder,
    Table 7 and the attempts (its page draws them; `warm` fetches them ahead). `only`: those of
    these names (a section's): with a period or a user, Tables 2 and 7 are each recomputed
    (queries.summary), and a section waits for no other's."""
    frames: dict[str, Callable[[], pl.DataFrame]] = {
        "causes": lambda: fetch(queries.summary, f, "queue_cause_summary"),
        "idle_daily": lambda: fetch(queries.queue_idle_daily, f),
        "holders": lambda: fetch(queries.queue_idle_holders, f),
        "reasons": lambda: fetch(queries.summary, f, "failure_reasons"),
        "attempts": lambda: fetch(queries.failure_attempts, f, reason),
    }
    return {name: get() for name, get in frames.items() if only is None or name in only}


def warm() -> None:
    """Open the warehouse's connection and fill the caches of the pages a visitor opens first:
    the status, the sidebar's filter options, the freshness, then the Overview and the Queue and
    failures page of the default view (the first cluster, no other filter), the Overview's in
    the order its page asks for them: a first visitor after a start, who lands on the Overview,
    waits for no other page's work (bench/RESULTS.md, "Dashboard on 1 M jobs"). Called by the
    server once it runs, so that the first visitor after a start does not run them itself. Past
    the Overview's, each query waits until no page has run for a while (`PAGE_RUNS`): a
    visitor's page does not share the CPU with work for another page; the Overview's queries
    filled count as a page run's end (`PageRuns.ended_now`), for the first visitor's page."""
    if not current_status().ok:
        return
    connection().close()
    clusters = fetch(queries.filter_options)["cluster"].unique(maintain_order=True).to_list()
    fetch(queries.model_options)
    cluster_freshness()
    if not clusters:
        return
    default = Filters(cluster=clusters[0])
    # The Overview's own, whoever visits: a visitor of the Overview waits for the query running
    # here and finds the next ones cached (the two threads' work overlaps the page's own)
    overview(default)
    PAGE_RUNS.ended_now()  # a first visitor's page may be about to run
    _warming.active = True
    try:
        queue(default)
        replay(make_rule([POLICY_HOURS]), default)  # the Policies page's, the costliest
    finally:
        _warming.active = False


def current_status() -> Status:
    root = data_dir()
    return status(root, _version(str(root)))


@st.cache_data(ttl=600, max_entries=16, show_spinner=False)
def _freshness(root: str, version: tuple[tuple[str, float], ...]) -> pl.DataFrame:
    return freshness.freshness(Path(root))


def cluster_freshness() -> pl.DataFrame:
    """gpuwaste.analyses.freshness.freshness of the warehouse (per cluster x source: last ingest,
    last analyze, newest sample, stale or not and why), cached until the warehouse changes."""
    root = data_dir()
    return _freshness(str(root), _version(str(root)))
