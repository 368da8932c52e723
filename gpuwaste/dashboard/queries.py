"""The dashboard's own queries: result tables in, polars frames out (the reads it shares with
`gpuwaste job` and the exporter, one job's rows and the idle running jobs, are in
`gpuwaste.analyses.reads`).

Each function takes a DuckDB connection (read-only, see data.py) and a `Filters`, and returns a
small frame: the aggregation happens in DuckDB, so a page never pulls a million rows. None of
them defines a metric: they select, filter, sum GPU hours already computed by `gpuwaste analyze`,
or count jobs at or below a few hundred values of a result column to draw its CDF.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import duckdb
import polars as pl

from gpuwaste.analyses.period_summary import EVENT_SUMMARIES, event_summary, in_period
from gpuwaste.analyses.registry import (
    BY_NAME,
    CLUSTER_ROW_TABLES,
    PER_JOB_TABLES,
    SUMMARY_TABLES,
)
from gpuwaste.dashboard.filters import Filters, in_list
from gpuwaste.warehouse.reading import read_frame as _pl
from gpuwaste.warehouse.results import ALL_VCS, FAILURE_REASONS_ORDER
from gpuwaste.warehouse.schema import table as result_table

CDF_POINTS = 201  # CDF at x = 0, 0.5, ..., 100 %: one curve is 201 points whatever the job count

# job_usage columns whose distribution across jobs the CDF page draws [CloudBrain §IV-A].
CDF_COLUMNS: dict[str, str] = {
    "util_mean": "GPU utilization (mean)",
    "util_max": "GPU utilization (max)",
    "mem_util_mean": "GPU memory utilization (mean)",
    "mem_util_max": "GPU memory utilization (max)",
    "cpu_util_mean": "CPU utilization (mean)",
    "cpu_util_max": "CPU utilization (max)",
    "host_mem_util_mean": "Host memory utilization (mean)",
    "host_mem_util_max": "Host memory utilization (max)",
}

# waste_daily columns, in the order the Overview shows them.
LOST_KINDS: dict[str, str] = {
    "idle_slot_gpu_h": "Idle slots",
    "never_used_gpu_h": "Never-used GPUs",
    "missing_gpu_h": "No data",
}
JOB_KINDS: dict[str, str] = {
    "debug_gpu_h": "Debugging jobs",
    "failed_gpu_h": "Failed jobs",
    "killed_gpu_h": "Killed jobs",
}

# Every result table, from the analyses' registry (per-job tables, the summaries, the tables of
# rows per waiting stretch).
RESULT_TABLES = (*PER_JOB_TABLES, *SUMMARY_TABLES, *CLUSTER_ROW_TABLES)

JOB_LIST_COLUMNS = (
    'job_id, "user", vc, name, state, gpus, start_ts, end_ts, '
    "round(gpu_s / 3600, 2) AS gpu_h, "
    "round((idle_slot_gpu_s + never_used_gpu_s) / 3600, 2) AS lost_gpu_h, "
    "round(util_mean, 1) AS util_mean, never_used_gpus, idle_slots, is_debug, diagnoses, "
    "round(lost_cost, 2) AS lost_cost"
)

# the job_usage columns job_lists reads: JOB_LIST_COLUMNS' and those JOB_LISTS test and order by
JOB_LIST_SOURCE = (
    'cluster, job_id, "user", vc, name, state, gpus, start_ts, end_ts, gpu_s, idle_slot_gpu_s, '
    "never_used_gpu_s, util_mean, never_used_gpus, idle_slots, is_debug, diagnoses, lost_cost, "
    "hit_time_limit, n_stable_phases, running, queue_delay_s"
)


# ----------------------------------------------------------------- options
def filter_options(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """One row per (cluster, vc) with its first and last job day: the filters' choices."""
    return _pl(
        con,
        "SELECT cluster, vc, count(*) AS jobs, min(start_ts)::DATE AS first_day, "
        "max(coalesce(end_ts, start_ts))::DATE AS last_day "
        "FROM job_usage GROUP BY ALL ORDER BY cluster, vc",
    )


def model_options(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """One row per (cluster, job GPU model) with its jobs: the GPU model filter's choices."""
    return _pl(
        con,
        "SELECT cluster, gpu_model, count(*) AS jobs FROM job_usage "
        "GROUP BY ALL ORDER BY cluster, jobs DESC, gpu_model",
    )


def quarantine_reasons(con: duckdb.DuckDBPyConnection, f: Filters, limit: int = 50) -> pl.DataFrame:
    where, params = ("cluster = ?", [f.cluster]) if f.cluster else ("true", [])
    return _pl(
        con,
        f"SELECT cluster, source, split_part(reason, ':', 1) AS reason, count(*) AS records, "
        f"max(ingested_at) AS last_seen, min(location) AS example_location "
        f"FROM quarantine WHERE {where} GROUP BY ALL ORDER BY records DESC LIMIT {int(limit)}",
        params,
    )


# ----------------------------------------------------------------- overview
def gpu_hours(con: duckdb.DuckDBPyConnection, f: Filters) -> pl.DataFrame:
    """waste_daily summed over the period and the selected VCs: one row. With `observed_gpu_h`
    and `util_gpu_h` (GPU utilization, time-weighted mean = util_gpu_h / observed_gpu_h) when
    waste_daily has them (written by analyze since they were added)."""
    where, params = f.summary_where(days=True)
    have = set(_pl(con, "SELECT * FROM waste_daily LIMIT 0").columns)
    utilization = [c for c in ("observed_gpu_h", "util_gpu_h") if c in have]
    cols = ["alloc_gpu_h", "busy_gpu_h", *LOST_KINDS, *JOB_KINDS, *utilization]
    sums = ", ".join(f"coalesce(sum({c}), 0) AS {c}" for c in cols)
    return _pl(
        con, f"SELECT {sums}, count(DISTINCT day) AS days FROM waste_daily WHERE {where}", params
    )


def energy_totals(con: duckdb.DuckDBPyConnection, f: Filters) -> pl.DataFrame:
    """energy_daily summed over the period and the selected VCs and GPU models: one row,
    `energy_kwh` and `lost_energy_kwh` (null when no GPU in view has a power reading), the
    figures job_gpu_hours gives for the same view (both split allocations by their overlap with
    the days) from a few summary rows instead of every GPU row of every job."""
    where, params = f.summary_where(days=True)
    return _pl(
        con,
        "SELECT sum(energy_kwh) AS energy_kwh, sum(lost_energy_kwh) AS lost_energy_kwh "
        f"FROM energy_daily WHERE {where}",
        params,
    )


def gpu_hours_daily(con: duckdb.DuckDBPyConnection, f: Filters) -> pl.DataFrame:
    """waste_daily per day (summed over the selected VCs)."""
    where, params = f.summary_where(days=True)
    cols = ["alloc_gpu_h", "busy_gpu_h", *LOST_KINDS, *JOB_KINDS]
    sums = ", ".join(f"sum({c}) AS {c}" for c in cols)
    return _pl(
        con, f"SELECT day, {sums} FROM waste_daily WHERE {where} GROUP BY day ORDER BY day", params
    )


def _written(con: duckdb.DuckDBPyConnection, summary: str, cluster: str) -> bool:
    """Whether `gpuwaste analyze` wrote `summary`'s rows of `cluster` (not before the version
    that added it: the cluster was analyzed before, and the next analyze writes them)."""
    n = _pl(con, f"SELECT count(*) AS n FROM {summary} WHERE cluster = ?", [cluster])["n"]
    return bool(n.len() and n[0])


def _lost_by_user_where(
    con: duckdb.DuckDBPyConnection, f: Filters, vc_rows: bool = False
) -> tuple[str, list[Any]] | None:
    """WHERE over lost_by_user that selects view `f`'s jobs (its VCs, GPU models and user;
    `vc_rows`: one row per VC, not the '(all)' rows, where no VC is selected), or None where
    the table cannot answer: a period, size or state filter (it sums whole jobs per VC, model
    and user), no cluster chosen, or a cluster whose last analyze did not write it."""
    if f.start or f.end or f.sizes or f.states or not f.cluster:
        return None
    if not _written(con, "lost_by_user", f.cluster):
        return None
    clauses = ["cluster = ?", in_list("gpu_model", f.summary_models)]
    params: list[Any] = [f.cluster, *f.summary_models]
    if vc_rows and not f.vcs:
        clauses.append("vc <> ?")
        params.append(ALL_VCS)
    else:
        clauses.append(in_list("vc", f.summary_vcs))
        params.extend(f.summary_vcs)
    if f.user:
        clauses.append('"user" = ?')
        params.append(f.user)
    return " AND ".join(clauses), params


def _lost_by(con: duckdb.DuckDBPyConnection, f: Filters, who: str, limit: int) -> pl.DataFrame:
    """Per `who` (a job_usage column: "user" or vc), over jobs in the view: GPU hours, those lost
    to idle slots and never-used GPUs, and with [cost] prices the money (`cost`, `lost_cost`:
    null where no GPU of the jobs is priced); most GPU hours lost first; jobs without one under
    '(none)', as lost_by_user has them. From lost_by_user's few rows where it answers the view,
    else from every job."""
    summary = _lost_by_user_where(con, f, vc_rows=who == "vc")
    if summary is not None:
        where, params = summary
        return _pl(
            con,
            f"""
            SELECT {who}, sum(jobs)::BIGINT AS jobs, round(sum(gpu_h), 2) AS gpu_h,
                   round(sum(idle_slot_gpu_h), 2) AS idle_slot_gpu_h,
                   round(sum(never_used_gpu_h), 2) AS never_used_gpu_h,
                   round(sum(lost_gpu_h), 2) AS lost_gpu_h,
                   round(sum(cost), 2) AS cost, round(sum(lost_cost), 2) AS lost_cost
            FROM lost_by_user WHERE {where}
            GROUP BY {who} ORDER BY lost_gpu_h DESC, {who} LIMIT {int(limit)}
            """,
            params,
        )
    where, params = f.jobs_where()
    return _pl(
        con,
        f"""
        SELECT coalesce({who}, '(none)') AS {who}, count(*) AS jobs,
               round(sum(gpu_s) / 3600, 2) AS gpu_h,
               round(sum(idle_slot_gpu_s) / 3600, 2) AS idle_slot_gpu_h,
               round(sum(never_used_gpu_s) / 3600, 2) AS never_used_gpu_h,
               round(sum(idle_slot_gpu_s + never_used_gpu_s) / 3600, 2) AS lost_gpu_h,
               round(sum(gpu_cost), 2) AS cost, round(sum(lost_cost), 2) AS lost_cost
        FROM job_usage WHERE {where}
        GROUP BY {who} ORDER BY lost_gpu_h DESC, {who} LIMIT {int(limit)}
        """,
        params,
    )


def top_users(con: duckdb.DuckDBPyConnection, f: Filters, limit: int = 15) -> pl.DataFrame:
    """Users by GPU hours lost to idle slots and never-used GPUs, over jobs in the view."""
    return _lost_by(con, f, '"user"', limit)


def top_vcs(con: duckdb.DuckDBPyConnection, f: Filters, limit: int = 50) -> pl.DataFrame:
    """VCs by GPU hours lost to idle slots and never-used GPUs, over jobs in the view."""
    return _lost_by(con, f, "vc", limit)


def top_jobs(con: duckdb.DuckDBPyConnection, f: Filters, limit: int = 25) -> pl.DataFrame:
    where, params = f.jobs_where()
    return _pl(
        con,
        f"SELECT cluster, {JOB_LIST_COLUMNS} FROM job_usage WHERE {where} "
        f"ORDER BY lost_gpu_h DESC, job_id LIMIT {int(limit)}",
        params,
    )


def job_counts(con: duckdb.DuckDBPyConnection, f: Filters) -> pl.DataFrame:
    """One row: the view's jobs, users, GPU hours and GPU hours lost (idle slots, never-used
    GPUs), from lost_by_user where it answers the view, else from every job."""
    summary = _lost_by_user_where(con, f)
    if summary is not None:
        where, params = summary
        return _pl(
            con,
            'SELECT coalesce(sum(jobs), 0)::BIGINT AS jobs, count(DISTINCT "user") AS users, '
            "coalesce(sum(gpu_h), 0) AS gpu_h, coalesce(sum(lost_gpu_h), 0) AS lost_gpu_h "
            f"FROM lost_by_user WHERE {where}",
            params,
        )
    where, params = f.jobs_where()
    return _pl(
        con,
        f'SELECT count(*) AS jobs, count(DISTINCT "user") AS users, '
        f"coalesce(sum(gpu_s), 0) / 3600 AS gpu_h, "
        f"coalesce(sum(idle_slot_gpu_s + never_used_gpu_s), 0) / 3600 AS lost_gpu_h "
        f"FROM job_usage WHERE {where}",
        params,
    )


# ----------------------------------------------------------------- CDFs
def job_cdf(
    con: duckdb.DuckDBPyConnection, f: Filters, column: str, points: int = CDF_POINTS
) -> pl.DataFrame:
    """The CDF of a job_usage percentage column per VC, and over all selected VCs as "(all)":
    long frame (vc, jobs, x, p) with `points` rows per curve, p = share of jobs with value <= x
    at x = 0, 100/(points-1), ..., 100 (percentile ranks on a fixed grid).

    Computed in DuckDB in one pass (each job counted at the first grid point at or above its
    value, then cumulated), so a curve is `points` rows whatever the job count, and far faster
    than a sort-based `quantile_cont` over 201 quantiles (bench/RESULTS.md, "Dashboard on 1 M
    jobs", the CDFs).
    Values are percentages (0-100 by the result contract); any outside are clamped to the ends.
    """
    if column not in CDF_COLUMNS:
        raise ValueError(f"no CDF for column {column!r}")
    steps = points - 1
    where, params = f.jobs_where()
    counts = _pl(
        con,
        f"""
        WITH b AS (
            SELECT vc, least(greatest(ceil({column} * {steps} / 100.0), 0), {steps})::INTEGER AS k
            FROM job_usage WHERE {where} AND {column} IS NOT NULL
        )
        SELECT coalesce(vc, ?) AS vc, k, count(*) AS n
        FROM b GROUP BY GROUPING SETS ((vc, k), (k))
        """,
        [*params, ALL_VCS],
    )
    schema = {"vc": pl.String, "jobs": pl.Int64, "x": pl.Float64, "p": pl.Float64}
    if counts.height == 0:
        return pl.DataFrame(schema=schema)
    grid = pl.DataFrame({"k": pl.Series(range(points), dtype=pl.Int32)})
    groups = counts.select("vc").unique()
    return (
        groups.join(grid, how="cross")
        .join(counts.with_columns(pl.col("k").cast(pl.Int32)), on=["vc", "k"], how="left")
        .with_columns(pl.col("n").fill_null(0))
        .sort("vc", "k")
        .with_columns(
            jobs=pl.col("n").sum().over("vc"),
            x=pl.col("k") * (100.0 / steps),
            cum=pl.col("n").cum_sum().over("vc"),
        )
        .with_columns(p=pl.col("cum") / pl.col("jobs"))
        .select(
            pl.col("vc"),
            pl.col("jobs").cast(pl.Int64),
            pl.col("x").cast(pl.Float64),
            pl.col("p").cast(pl.Float64),
        )
        .sort(pl.col("vc") == "(all)", "vc", "x")
    )


# util_minute_hist.size is a GPU count (or 'all'), the filter's sizes are size classes: the
# counts of a class are those job_usage puts in it (job_usage.sql is the classes' one home)
SIZES_OF_CLASSES = "SELECT DISTINCT CAST(gpus AS VARCHAR) FROM job_usage WHERE {classes}"


def minute_cdf(con: duckdb.DuckDBPyConnection, f: Filters, by: str) -> pl.DataFrame:
    """Cumulated util_minute_hist [Philly Fig. 5]: (group, bucket, gpu_minutes, cdf) with one
    curve per size class (by="size") or final status (by="state")."""
    if by not in ("size", "state"):
        raise ValueError("by must be 'size' or 'state'")
    where, params = f.summary_where()
    if f.sizes:
        classes = in_list("size_class", f.sizes)
        where += f" AND size IN ({SIZES_OF_CLASSES.format(classes=classes)})"
        params += list(f.sizes)
    if f.states:
        where += f" AND {in_list('state', f.states)}"
        params += list(f.states)
    # The table also holds each row summed over sizes ('all') and over states ('all'): a curve
    # by state without a size filter reads the 'all' sizes, a curve by size without a state
    # filter the 'all' states, or every GPU-minute would be counted twice.
    if by == "state" and not f.sizes:
        where += " AND size = 'all'"
    if by == "size" and not f.states:
        where += " AND state = 'all'"
    return _pl(
        con,
        f"""
        WITH h AS (
            SELECT {by} AS grp, bucket, sum(gpu_minutes) AS gpu_minutes
            FROM util_minute_hist WHERE {where} GROUP BY ALL
        )
        SELECT grp, bucket, gpu_minutes,
               sum(gpu_minutes) OVER (PARTITION BY grp ORDER BY bucket)
                 / nullif(sum(gpu_minutes) OVER (PARTITION BY grp), 0) AS cdf
        FROM h ORDER BY grp, bucket
        """,
        params,
    )


# ----------------------------------------------------------------- summary tables
SUMMARY_ORDER: dict[str, str] = {
    "waste_by_vc": "vc, gpu_model, kind",
    "never_used_by_size": "vc, gpu_model, try_cast(gpus_requested AS INT) NULLS LAST",
    "stable_phase_grid": "vc, gpu_model, t_s, m_gib",
    "spatial_summary": "vc, gpu_model, metric",
    "debug_jobs": "vc, gpu_model, kind",
    "util_by_size_status": "vc, gpu_model, size, state",
    "util_by_spread": "vc, gpu_model, servers",
    "jobs_by_status": "vc, gpu_model, state",
    "queueing_delay": "vc, gpu_model, size_class",
    "queue_cause_summary": "vc, gpu_model, size_class, cause",
    "failure_reasons": f"vc, gpu_model, {FAILURE_REASONS_ORDER}",
    "waste_by_model": "vc, lost_gpu_h DESC, gpu_model",
}


def summary(con: duckdb.DuckDBPyConnection, f: Filters, table: str) -> pl.DataFrame:
    """Rows of one per-(cluster, VC) summary table for the view's cluster and VCs. A summary of
    whole events (EVENT_SUMMARIES: Tables 2 and 7) with a period or a user in the view is
    recomputed by its own SQL over the stored events of the period and user
    (`period_events`); without, read as analyze stored it."""
    if table not in SUMMARY_ORDER:
        raise ValueError(f"{table} is not a summary table")
    where, params = f.summary_where(by_model=table == "waste_by_model")
    sql = f"SELECT * FROM {table} WHERE {where} ORDER BY cluster, {SUMMARY_ORDER[table]}"
    if table not in EVENT_SUMMARIES or not period_events(f):
        return _pl(con, sql, params)
    # the view's rows of the recomputed summary, selected and ordered as the stored ones are
    cur = con.cursor()
    try:
        cur.register(table, _event_summary(cur, f, table))
        return _pl(cur, sql, params)
    finally:
        cur.close()


def period_events(f: Filters) -> bool:
    """Whether view `f` narrows the summaries of whole events (EVENT_SUMMARIES) to some of their
    events: a period (the events dated in it, `period_summary`) or a user (the events of their
    jobs)."""
    return f.period_start is not None or f.user is not None


def _event_summary(con: duckdb.DuckDBPyConnection, f: Filters, table: str) -> pl.DataFrame:
    """Summary `table` of the view's cluster (every cluster with events, when none is chosen)
    over the events dated in its period, of its user's jobs."""
    (source,) = (i for i in BY_NAME[table].inputs if BY_NAME[i].dated_by)
    clusters = (
        [f.cluster]
        if f.cluster
        else _pl(con, f"SELECT DISTINCT cluster FROM {source} ORDER BY cluster")["cluster"]
    )
    frames = [event_summary(con, table, c, f.period_start, f.period_end, f.user) for c in clusters]
    if not frames:
        return _pl(con, f"SELECT * FROM {table} LIMIT 0")
    return pl.concat(frames, how="diagonal_relaxed").select(list(result_table(table).columns))


def job_lists(
    con: duckdb.DuckDBPyConnection, f: Filters, names: tuple[str, ...], limit: int = 200
) -> pl.DataFrame:
    """Jobs in the view satisfying each of JOB_LISTS' `names` (fixed conditions of this module,
    never user text), the first `limit` of each in its order; `list` names a row's list. One
    query for every job table of a page, which each table reads its rows of."""
    where, params = f.jobs_where()
    parts = []
    for i, name in enumerate(names):
        condition, order = JOB_LISTS[name]
        # each list's rows keep their order: numbered after the LIMIT (on its few rows)
        parts.append(
            f"SELECT '{name}' AS list, {i} AS part, row_number() OVER () AS pos, * FROM "
            f"(SELECT cluster, {JOB_LIST_COLUMNS} FROM jobs WHERE ({condition}) "
            f"ORDER BY {order} LIMIT {int(limit)})"
        )
    # the view's jobs read once (the lists' columns only), not once per list: half the CPU
    jobs = f"jobs AS MATERIALIZED (SELECT {JOB_LIST_SOURCE} FROM job_usage WHERE {where})"
    frame = _pl(con, f"WITH {jobs} " + " UNION ALL ".join(parts) + " ORDER BY part, pos", params)
    return frame.drop("part", "pos")


JOB_LISTS: dict[str, tuple[str, str]] = {  # name: (condition, order), over JOB_LIST_SOURCE
    "debug_time_limit": ("is_debug AND hit_time_limit", "lost_gpu_h DESC, job_id"),
    "never_used": ("never_used_gpus > 0", "never_used_gpu_s DESC, job_id"),
    "lost": ("idle_slot_gpu_s + never_used_gpu_s > 0", "lost_gpu_h DESC, job_id"),
    "stable_phases": ("n_stable_phases > 0", "n_stable_phases DESC, lost_gpu_h DESC, job_id"),
    "debug": ("is_debug", "lost_gpu_h DESC, job_id"),
    "low_util": ("NOT running AND util_mean IS NOT NULL", "gpu_s * (100 - util_mean) DESC, job_id"),
    "failed": ("state IN ('killed', 'unsuccessful')", "gpu_s DESC, job_id"),
    "queued": ("queue_delay_s IS NOT NULL", "queue_delay_s DESC, job_id"),
}


FAILED_ATTEMPTS_SHOWN = 500  # the drill-down's rows: the most GPU time first


def failure_attempts(
    con: duckdb.DuckDBPyConnection, f: Filters, reason: str | None, limit: int | None = None
) -> pl.DataFrame:
    """Failed attempts of the view's jobs (failure_attempts; the filters over the job's
    job_usage row, but the period: the attempts that started in it, those Table 7 counts,
    `period_summary`), of one reason or all, the most GPU time first, at most `limit`
    (default FAILED_ATTEMPTS_SHOWN): the drill-down of Table 7."""
    limit = FAILED_ATTEMPTS_SHOWN if limit is None else limit
    where, params = replace(f, start=None, end=None).jobs_where("u")
    started, bounds = in_period("failure_attempts", f.period_start, f.period_end, "a")
    where += f" AND {started}"
    params.extend(bounds.values())
    if reason is not None:
        where += " AND a.reason = ?"
        params.append(reason)
    return _pl(
        con,
        "SELECT a.job_id, a.attempt, a.user, a.vc, a.reason, a.origin, a.gpus, "
        "a.runtime_s / 60 AS runtime_min, a.gpu_s, a.raw_state, a.exit_code, a.exit_signal, "
        "a.log_path, a.line_no, a.line, a.start_ts, a.end_ts "
        "FROM failure_attempts a JOIN job_usage u ON u.cluster = a.cluster AND u.job_id = a.job_id "
        f"WHERE {where} ORDER BY a.gpu_s DESC NULLS LAST, a.job_id, a.attempt LIMIT {int(limit)}",
        params,
    )


# ----------------------------------------------------------------- finding a job
def search_jobs(
    con: duckdb.DuckDBPyConnection, f: Filters, text: str, limit: int = 200
) -> pl.DataFrame:
    """Jobs in the view whose id starts with, or whose user contains, `text`."""
    where, params = f.jobs_where()
    text = text.strip()
    if text:
        where += " AND (job_id LIKE ? ESCAPE '\\' OR \"user\" ILIKE ? ESCAPE '\\')"
        esc = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        params += [esc + "%", "%" + esc + "%"]
    return _pl(
        con,
        f"SELECT cluster, {JOB_LIST_COLUMNS} FROM job_usage WHERE {where} "
        f"ORDER BY lost_gpu_h DESC, job_id LIMIT {int(limit)}",
        params,
    )


# ----------------------------------------------------------------- status
def table_counts(
    con: duckdb.DuckDBPyConnection, tables: tuple[str, ...] = RESULT_TABLES
) -> dict[str, int]:
    out: dict[str, int] = {}
    for t in tables:
        n = _pl(con, f'SELECT count(*) AS n FROM "{t}"')["n"]
        out[t] = int(n[0]) if n.len() else 0
    return out


# ----------------------------------------------------------------- overview, per job
def unresolved_gpu_hours(con: duckdb.DuckDBPyConnection, f: Filters) -> pl.DataFrame:
    """GPU hours of the jobs whose GPUs stayed unknown (`job_gpus.gpu` = -1, `gpu_from` =
    `unknown`) and that analyze therefore left out (no `job_gpu_usage` row): their GPU count
    (else one per host) x their time within the period; a running job counts up to how far its
    cluster's data reach (the newest ingest watermark), as analyze bounds it. One row:
    `unresolved_gpu_h`, `jobs`. Cluster, VC and period filters apply (the others are columns of
    job_usage, which these jobs are not in)."""
    lo, hi = f.period_start, f.period_end
    where, params = f.place().jobs_where("j")
    span = (
        "epoch(least(coalesce(j.end_ts, w.reach, now()), coalesce(?::timestamptz, 'infinity')) "
        "- greatest(j.start_ts, coalesce(?::timestamptz, '-infinity')))"
    )
    return _pl(
        con,
        f"""
        WITH u AS (
            SELECT cluster, job_id, count(*) AS hosts FROM job_gpus WHERE gpu < 0
            GROUP BY cluster, job_id
        ), w AS (
            SELECT cluster, max(watermark) AS reach FROM ingest_state GROUP BY cluster
        )
        SELECT coalesce(sum(coalesce(j.gpus, u.hosts) * greatest({span}, 0)), 0) / 3600
                   AS unresolved_gpu_h,
               count(*) AS jobs
        FROM jobs AS j JOIN u USING (cluster, job_id) LEFT JOIN w USING (cluster)
        WHERE j.start_ts IS NOT NULL AND {where}
          AND NOT EXISTS (SELECT 1 FROM job_gpu_usage AS x
                          WHERE x.cluster = j.cluster AND x.job_id = j.job_id)
        """,
        [hi, lo, *params],
    )


def job_gpu_hours(con: duckdb.DuckDBPyConnection, f: Filters) -> pl.DataFrame:
    """gpu_hours' row for the jobs in the view, every filter applied (user, size and state too,
    which waste_daily cannot honor): job_gpu_usage of those jobs summed, each GPU allocation
    counted for its overlap with the period as waste_daily splits it across days (a share of
    its wall time: alloc_s are GPU seconds, a MIG slice's or a shared GPU's weighted). Also
    `idle_held_gpu_h` and `idle_empty_gpu_h` (held idle: 0 % with GPU memory held, busy for the
    studies, null when no GPU in view has a memory reading; empty idle: the idle-slot hours), `observed_gpu_h` (GPU hours with data) and `util_gpu_h` (utilization-weighted GPU hours):
    100 * util_gpu_h / observed_gpu_h is the GPU utilization (time-weighted mean) of the view.
    And `energy_kwh`, `lost_energy_kwh`: the GPUs' kWh and the part lost (docs/definitions.md
    #energy), null when no GPU in view has a power reading, and `held_idle_energy_kwh` (in
    held-idle stretches, not part of the lost)."""
    where, params = f.jobs_where("j")
    lo, hi = f.period_start, f.period_end
    share = (
        "greatest(epoch(least(g.end_ts, ?) - greatest(g.start_ts, ?)), 0)"
        " / epoch(g.end_ts - g.start_ts)"
        if lo is not None and hi is not None
        else "1.0"
    )
    share_params = [hi, lo] if lo is not None and hi is not None else []
    cols = {
        "alloc_gpu_h": "share * alloc_s",
        "busy_gpu_h": "share * busy_s",
        "idle_slot_gpu_h": "share * idle_slot_s",
        "idle_empty_gpu_h": "share * idle_empty_s",
        "never_used_gpu_h": "share * never_used_s",
        "missing_gpu_h": "share * missing_s",
        "debug_gpu_h": "share * alloc_s) FILTER (WHERE is_debug",
        "failed_gpu_h": "share * alloc_s) FILTER (WHERE state = 'unsuccessful'",
        "killed_gpu_h": "share * alloc_s) FILTER (WHERE state = 'killed'",
        "observed_gpu_h": "share * observed_s",
        "util_gpu_h": "share * coalesce(util_mean, 0) / 100 * observed_s",
    }
    sums = ", ".join(f"coalesce(sum({e}), 0) / 3600 AS {c}" for c, e in cols.items())
    # held idle as energy: null where no GPU in view has a memory reading (not measured)
    sums += (
        ", sum(share * idle_held_s) / 3600 AS idle_held_gpu_h"
        ", sum(share * energy_kwh) AS energy_kwh, sum(share * lost_energy_kwh) AS lost_energy_kwh"
        ", sum(share * held_idle_energy_kwh) AS held_idle_energy_kwh"
    )
    return _pl(
        con,
        f"""
        WITH g AS (
            SELECT {share} AS share, g.alloc_s, g.busy_s, g.idle_slot_s, g.idle_held_s,
                   g.idle_empty_s, g.never_used_s, g.missing_s, g.observed_s, g.util_mean,
                   g.energy_kwh, g.lost_energy_kwh, g.held_idle_energy_kwh, j.is_debug, j.state
            FROM job_gpu_usage g JOIN job_usage j ON j.cluster = g.cluster AND j.job_id = g.job_id
            WHERE {where} AND g.alloc_s > 0
        )
        SELECT {sums} FROM g WHERE share > 0
        """,
        share_params + params,
    )


# ----------------------------------------------------------------- waiting behind idle GPUs
def _queue_idle_where(f: Filters, others_only: bool = True) -> tuple[str, list[Any]]:
    """queue_idle_overlap rows of the view: the cluster, the holders' VCs and user (the user
    filter reads as `report --by user`'s "others waited while you idled"), stretches that
    overlap the period (as sql/reports/waited_by.sql counts them for `report --by` and the
    digests); other users' waits only unless `others_only` is False (a user's own idle GPUs
    holding up their own job are not counted against them). A holder's idle GPUs span its jobs
    of every GPU model, size and state: those filters do not apply
    (widgets.WAITED_BEHIND_IDLE_FILTERS says so on the pages)."""
    place, params = f.place().jobs_where(vc="holder_vc")
    clauses = ["NOT same_user", place] if others_only else [place]
    if f.user:
        clauses.append("holder_user = ?")
        params.append(f.user)
    if f.period_start is not None and f.period_end is not None:
        clauses.append("wait_start < ? AND wait_end > ?")
        params.extend([f.period_end, f.period_start])
    return " AND ".join(clauses), params


def queue_idle_total(con: duckdb.DuckDBPyConnection, f: Filters) -> pl.DataFrame:
    """One row: waiting stretches of other users' jobs that idle GPUs kept waiting (blocked_gpu_s
    > 0), and the GPU hours they waited behind them (queue_idle_overlap.blocked_gpu_s). From
    waits_behind_idle's row of the view's cluster and VC where it answers the view (no period,
    no user: the table is per holder's VC only, at most one VC: a stretch waiting behind two VCs'
    holders is in both VCs' rows), else from every stretch."""
    one_place = len(f.vcs) <= 1 and f.start is None and f.end is None and not f.user
    if one_place and f.cluster and _written(con, "waits_behind_idle", f.cluster):
        return _pl(
            con,
            "SELECT coalesce(sum(blocked_waits), 0)::BIGINT AS waits, "
            "coalesce(sum(blocked_wait_gpu_h), 0) AS blocked_gpu_h "
            "FROM waits_behind_idle WHERE cluster = ? AND vc = ?",
            [f.cluster, f.summary_vcs[0]],
        )
    where, params = _queue_idle_where(f)
    return _pl(
        con,
        "SELECT count(DISTINCT (cluster, job_id, attempt)) FILTER (blocked_gpu_s > 0) AS waits, "
        "coalesce(sum(blocked_gpu_s), 0) / 3600 AS blocked_gpu_h "
        f"FROM queue_idle_overlap WHERE {where}",
        params,
    )


def queue_idle_daily(con: duckdb.DuckDBPyConnection, f: Filters) -> pl.DataFrame:
    """GPU hours waited behind idle GPUs per UTC day (of the wait's start) and holder's VC."""
    where, params = _queue_idle_where(f)
    return _pl(
        con,
        "SELECT wait_start::DATE AS day, holder_vc, sum(blocked_gpu_s) / 3600 AS blocked_gpu_h "
        f"FROM queue_idle_overlap WHERE {where} GROUP BY ALL ORDER BY day, holder_vc",
        params,
    )


def queue_idle_holders(con: duckdb.DuckDBPyConnection, f: Filters, limit: int = 25) -> pl.DataFrame:
    """Per holder (user, VC): the other users' waits their idle GPUs kept waiting and the GPU
    hours those waited behind them, the idle GPU hours inside the waits, and the GPU hours the
    holder's own jobs waited behind their own idle GPUs (`report --by user`'s
    own_blocked_gpu_h), most of others' first. A wait has one row per holder (the table's
    key), so a holder's rows count its waits: no distinct count over every row (5x the time on
    1 M jobs, bench/RESULTS.md "Dashboard on 1 M jobs")."""
    where, params = _queue_idle_where(f, others_only=False)
    return _pl(
        con,
        'SELECT holder_user AS "user", holder_vc AS vc, '
        "count(*) FILTER (NOT same_user AND blocked_gpu_s > 0) AS waits_behind, "
        "coalesce(sum(blocked_gpu_s) FILTER (NOT same_user), 0) / 3600 AS blocked_gpu_h, "
        "coalesce(sum(idle_gpu_s) FILTER (NOT same_user), 0) / 3600 AS idle_gpu_h, "
        "coalesce(sum(blocked_gpu_s) FILTER (same_user), 0) / 3600 AS own_blocked_gpu_h "
        f"FROM queue_idle_overlap WHERE {where} GROUP BY ALL "
        f'ORDER BY blocked_gpu_h DESC, "user" LIMIT {int(limit)}',
        params,
    )
