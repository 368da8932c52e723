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

from collections.abc import Callable
from datetime import datetime

import duckdb
import polars as pl

from gpuwaste.analyses.registry import ANALYSES, BY_NAME
from gpuwaste.analyses.sqlfiles import set_variables
from gpuwaste.warehouse.reading import read_frame, read_rows, run


def _dated(name: str) -> bool:
    return name in BY_NAME and bool(BY_NAME[name].dated_by)


# The summaries that read nothing but tables of whole events: a period's rows of them need no
# settings, no per-job view and no as_of, only the variable `cluster` (queue_cause_summary,
# failure_reasons, waits_behind_idle).
EVENT_SUMMARIES: tuple[str, ...] = tuple(
    a.name for a in ANALYSES if a.kind == "summary" and a.inputs and all(map(_dated, a.inputs))
)


def in_period(
    name: str,
    since: datetime | None,
    until: datetime | None,
    alias: str = "",
    user: str | None = None,
    bind: Callable[[str], str] = lambda _: "?",
) -> tuple[str, dict[str, datetime | str]]:
    """SQL for the rows of table `name` (of whole events, `alias`: its alias in the query) dated
    in [since, until) (None: no bound), of `user`'s jobs when given ("true": no bound at all),
    and the values of its parameters in order, by name; `bind(name)` writes one (default `?`)."""
    column = f"{alias}.{BY_NAME[name].dated_by}" if alias else BY_NAME[name].dated_by
    who = f'{alias}."user"' if alias else '"user"'
    tests = {"since": (f"{column} >=", since), "until": (f"{column} <", until),
             "user": (f"{who} =", user)}  # fmt: skip
    kept = {k: (test, v) for k, (test, v) in tests.items() if v is not None}
    sql = " and ".join(f"{test} {bind(k)}" for k, (test, _) in kept.items())
    return sql or "true", {k: v for k, (_, v) in kept.items()}


def dated_rows(
    con: duckdb.DuckDBPyConnection,
    name: str,
    cluster: str,
    since: datetime | None,
    until: datetime | None = None,
) -> pl.DataFrame:
    """The stored rows of table `name` (of whole events: its `dated_by`) of `cluster` dated in
    [since, until) (`in_period`)."""
    dated, values = in_period(name, since, until)
    return read_frame(
        con, f'select * from "{name}" where cluster = ? and {dated}', [cluster, *values.values()]
    )


def _variable(name: str) -> str:
    return f"getvariable('period_{name}')"


def register_dated_inputs(
    con: duckdb.DuckDBPyConnection,
    name: str,
    cluster: str,
    since: datetime | None,
    until: datetime | None = None,
    user: str | None = None,
) -> None:
    """The tables of events that summary `name` reads (queue_cause_summary: queue_causes;
    failure_reasons: failure_attempts; waits_behind_idle: queue_idle_overlap) made temp views
    on `con` in place of their views, of their stored rows of `cluster` in the period (of
    `user`'s jobs when given): else a summary of a period would read its inputs' rows of all
    time. Views over the stored ones, not copies: the summary's SQL reads only the columns and
    rows it needs (bench/RESULTS.md, "Dashboard on 1 M jobs": Tables 2 and 7 of a period); the
    bounds are variables of `con`, never spliced text."""
    database = read_rows(con, "select current_database()")[0][0]
    for i in BY_NAME[name].inputs:
        if not _dated(i):
            continue
        dated, values = in_period(i, since, until, user=user, bind=_variable)
        for var, value in {"cluster": cluster, **values}.items():
            run(con, f"set variable period_{var} = ?", [value])
        run(
            con,
            f'create or replace temp view "{i}" as select * from "{database}".main."{i}" '
            f"where cluster = {_variable('cluster')} and {dated}",
        )


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
