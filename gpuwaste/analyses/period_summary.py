"""A summary of a period, recomputed by its own SQL over the stored rows of whole events dated in
the period: the one way `gpuwaste report --since` and the dashboard's period filter narrow the
summaries of waits and failed attempts (Philly Tables 2 and 7).

A table of whole events (a waiting stretch, a failed attempt) declares the column that dates a
row (`dated_by` in the registry: a wait by its end, the start it waited for; a failed attempt by
its start). A row is in the period [since, until) when that column is; `until` None: no end.
The summaries read those rows as analyze stored them, never events recomputed over the jobs of
the period alone, which would judge a wait against a cluster emptied of the jobs that started
before it. `user` keeps the events of that user's jobs.
"""

from __future__ import annotations

from datetime import datetime

import duckdb
import polars as pl

from gpuwaste.analyses.registry import ANALYSES, BY_NAME
from gpuwaste.analyses.sqlfiles import set_variables
from gpuwaste.warehouse.reading import read_frame


def _dated(name: str) -> bool:
    return name in BY_NAME and bool(BY_NAME[name].dated_by)


# The summaries that read nothing but tables of whole events: a period's rows of them need no
# settings, no per-job view and no as_of, only the variable `cluster` (queue_cause_summary,
# failure_reasons, waits_behind_idle).
EVENT_SUMMARIES: tuple[str, ...] = tuple(
    a.name for a in ANALYSES if a.kind == "summary" and a.inputs and all(map(_dated, a.inputs))
)


def in_period(
    name: str, since: datetime | None, until: datetime | None, alias: str = ""
) -> tuple[str, list[datetime]]:
    """SQL (with `?` parameters) for the rows of table `name` (of whole events, `alias`: its
    alias in the query) dated in [since, until), None: no bound; "true" for no bound at all."""
    column = f"{alias}.{BY_NAME[name].dated_by}" if alias else BY_NAME[name].dated_by
    bounds = [(f"{column} >= ?", since), (f"{column} < ?", until)]
    kept = [(sql, t) for sql, t in bounds if t is not None]
    return " and ".join(sql for sql, _ in kept) or "true", [t for _, t in kept]


def dated_rows(
    con: duckdb.DuckDBPyConnection,
    name: str,
    cluster: str,
    since: datetime | None,
    until: datetime | None = None,
    user: str | None = None,
) -> pl.DataFrame:
    """The stored rows of table `name` (of whole events: its `dated_by`) of `cluster` dated in
    [since, until) (`in_period`), of `user`'s jobs only when given."""
    dated, params = in_period(name, since, until)
    mine = ' and "user" = ?' if user is not None else ""
    return read_frame(
        con,
        f'select * from "{name}" where cluster = ? and {dated}{mine}',
        [cluster, *params, *([user] if user is not None else [])],
    )


def register_dated_inputs(
    con: duckdb.DuckDBPyConnection,
    name: str,
    cluster: str,
    since: datetime | None,
    until: datetime | None = None,
    user: str | None = None,
) -> None:
    """The tables of events that summary `name` reads (queue_cause_summary: queue_causes;
    failure_reasons: failure_attempts; waits_behind_idle: queue_idle_overlap), their stored
    rows in the period (`dated_rows`) registered on `con` in place of their views, as analyze
    registers a run's new rows: else a summary of a period would read its inputs' rows of all
    time."""
    for i in BY_NAME[name].inputs:
        if _dated(i):
            con.register(i, dated_rows(con, i, cluster, since, until, user))


def event_summary(
    con: duckdb.DuckDBPyConnection,
    name: str,
    cluster: str,
    since: datetime | None,
    until: datetime | None = None,
    user: str | None = None,
) -> pl.DataFrame:
    """Summary `name` (one of EVENT_SUMMARIES) of `cluster` over its events in [since, until)
    (of `user`'s jobs when given), with its `cluster` column, computed on a cursor of its own:
    `con` keeps its views and variables."""
    if name not in EVENT_SUMMARIES:
        raise ValueError(f"{name} is not a summary of events only ({', '.join(EVENT_SUMMARIES)})")
    cur = con.cursor()
    try:
        set_variables(cur, {"cluster": cluster})
        register_dated_inputs(cur, name, cluster, since, until, user)
        return BY_NAME[name].compute(cur).with_columns(pl.lit(cluster).alias("cluster"))
    finally:
        cur.close()


__all__ = [
    "EVENT_SUMMARIES",
    "dated_rows",
    "event_summary",
    "in_period",
    "register_dated_inputs",
]
