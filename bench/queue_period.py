"""Benchmark: Tables 2 and 7 of the dashboard's Queue and failures page for a period or a user,
recomputed by their SQL over the stored waits and failed attempts (queries.summary ->
gpuwaste.analyses.period_summary), against reading the stored tables (no period, no user).

    .venv/bin/python bench/queue_period.py --data-dir /tmp/visit/wh1m [--repeat 5]

On the warehouse at --data-dir (bench/dashboard.py's, with queue_causes and failure_attempts),
one read-only connection as the dashboard's (no Streamlit cache: what a view's first visit
runs), for each table: the stored read, the period of the first day, of the first half of the
window, of the whole window, and a user over all time, alternated, median of --repeat rounds
after one untimed round (the files' first read). Prints a markdown table for bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from datetime import date, timedelta
from pathlib import Path

from gpuwaste.dashboard import queries
from gpuwaste.dashboard.filters import Filters
from gpuwaste.warehouse.reading import read_rows
from gpuwaste.warehouse.readonly import read_only_connection

TABLES = ("queue_cause_summary", "failure_reasons")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data-dir", type=Path, required=True)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    con = read_only_connection(args.data_dir)
    cluster, first, last, user = read_rows(
        con,
        "select cluster, min(wait_end)::date, max(wait_end)::date, mode(user) "
        "from queue_causes group by cluster order by count(*) desc limit 1",
    )[0]
    assert isinstance(first, date) and isinstance(last, date)
    half = first + timedelta(days=(last - first).days // 2)
    views = {
        "stored (no period)": Filters(cluster=cluster),
        f"one day ({first})": Filters(cluster=cluster, start=first, end=first),
        f"first half ({first} to {half})": Filters(cluster=cluster, start=first, end=half),
        f"whole window ({first} to {last})": Filters(cluster=cluster, start=first, end=last),
        "a user, all time": Filters(cluster=cluster, user=user),
    }
    times: dict[tuple[str, str], list[float]] = {(v, t): [] for v in views for t in TABLES}
    for round_ in range(args.repeat + 1):
        for view, f in views.items():
            for t in TABLES:
                t0 = time.perf_counter()
                queries.summary(con, f, t)
                if round_:
                    times[(view, t)].append(time.perf_counter() - t0)
    rows = read_rows(con, "select (select count(*) from queue_causes), "
                     "(select count(*) from failure_attempts)")[0]  # fmt: skip
    con.close()
    print(f"{rows[0]:,} waits, {rows[1]:,} failed attempts; load {os.getloadavg()[0]:.1f}")
    print("| view | " + " | ".join(f"{t} (s)" for t in TABLES) + " |")
    print("| --- |" + " --- |" * len(TABLES))
    for view in views:
        cells = " | ".join(f"{statistics.median(times[(view, t)]):.3f}" for t in TABLES)
        print(f"| {view} | {cells} |")


if __name__ == "__main__":
    main()
