"""Benchmark: does every dashboard page render within 2 s on a warehouse of 1 M jobs?

    .venv/bin/python bench/dashboard.py [--jobs 1000000] [--data-dir D] [--keep] [--no-browser]
        [--browser-only]

1. writes a synthetic result warehouse of that many jobs (bench/harness/result_warehouse.py:
   every result table, ~3 GPUs per job, idle slots and phases for every GPU, samples for a few
   drill-down jobs);
2. per page, times its queries on a fresh read-only connection (cold: no Streamlit cache);
3. per page, times the whole page script headless (streamlit AppTest: queries + figures), cold;
4. per page, times a real browser (Debian's chromium, against `gpuwaste dashboard`) from
   navigation until every expected chart has its traces and the app is idle: the first page of a
   fresh browser on a fresh server; the page in a new tab of a browser that has the app's files
   cached, on a server just (re)started; the page in a new tab of a browser that has the app's files
   cached, on a running server, its queries not yet cached (an operator opening the dashboard in
   the morning); a switch to the page from the sidebar with its queries not yet cached; the same
   switch again (cached).

Prints a markdown table for bench/RESULTS.md. Median of --repeat runs for steps 2-3.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

from harness.result_warehouse import build_result_warehouse  # noqa: E402

from gpuwaste.analyses import reads  # noqa: E402
from gpuwaste.config import DATA_DIR_ENV  # noqa: E402
from gpuwaste.dashboard import queries as q  # noqa: E402
from gpuwaste.dashboard.filters import Filters  # noqa: E402
from gpuwaste.warehouse.readonly import read_only_connection  # noqa: E402

APP = REPO / "gpuwaste" / "dashboard" / "app.py"


def page_queries(job_id: str, data_dir: Path) -> dict[str, Callable[[Any, Filters], None]]:
    """The queries each page runs with the default view (first cluster, all VCs); the SQL
    page's runs in a process of its own over `data_dir`."""

    def overview(con: Any, f: Filters) -> None:
        q.filter_options(con)
        q.gpu_hours(con, f)
        q.gpu_hours_daily(con, f)
        q.top_users(con, f)
        q.top_jobs(con, f)
        reads.source_states(con, f.cluster)
        q.quarantine_reasons(con, f)

    def cdfs(con: Any, f: Filters) -> None:
        q.filter_options(con)
        q.job_cdf(con, f, "util_mean")
        q.job_cdf(con, f, "util_max")
        q.minute_cdf(con, f, "size")
        q.minute_cdf(con, f, "state")

    def waste(con: Any, f: Filters) -> None:
        q.filter_options(con)
        for t in q.SUMMARY_ORDER:
            q.summary(con, f, t)
        for cond, order in q.JOB_LISTS.values():
            q.job_list(con, f, cond, order)

    def job(con: Any, f: Filters) -> None:
        q.filter_options(con)
        q.search_jobs(con, f, "")
        reads.job(con, f.cluster, job_id)
        for t in ("job_gpu_usage", "idle_slots", "stable_phases"):
            reads.job_rows(con, t, f.cluster or "", job_id)
        reads.job_timeline(con, f.cluster or "", job_id)

    def sql(con: Any, f: Filters) -> None:
        from gpuwaste.dashboard import sqlbox
        from gpuwaste.warehouse.schema import all_tables

        sqlbox.run(data_dir, sqlbox.example(all_tables()["job_usage"]))

    return {"overview": overview, "cdfs": cdfs, "waste": waste, "job": job, "sql": sql}


def median_time(fn: Callable[[], None], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_queries(data_dir: Path, job_id: str, repeat: int) -> dict[str, float]:
    out = {}
    f = Filters(cluster="demo")
    for name, fn in page_queries(job_id, data_dir).items():

        def run(fn: Callable[[Any, Filters], None] = fn) -> None:
            con = read_only_connection(data_dir)  # fresh: nothing cached
            try:
                fn(con, f)
            finally:
                con.close()

        out[name] = median_time(run, repeat)
    return out


def bench_apptest(data_dir: Path, job_id: str, repeat: int) -> dict[str, float]:
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    os.environ[DATA_DIR_ENV] = str(data_dir)
    out = {}
    for name in ("overview", "cdfs", "waste", "job", "sql"):

        def run(name: str = name) -> None:
            st.cache_data.clear()
            st.cache_resource.clear()
            at = AppTest.from_file(str(APP), default_timeout=120)
            if name == "job":
                at.query_params["job"] = job_id
            if name == "overview":
                at.run()
            else:
                # switch_page needs one run first; time only the page's own run
                at.run()
                st.cache_data.clear()
                st.cache_resource.clear()
                at.switch_page(f"views/{name}.py")
                t0 = time.perf_counter()
                at.run()
                run.elapsed = time.perf_counter() - t0  # type: ignore[attr-defined]
                assert not at.exception, [e.value for e in at.exception]
                return
            assert not at.exception, [e.value for e in at.exception]

        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            run()
            times.append(getattr(run, "elapsed", time.perf_counter() - t0))
        out[name] = statistics.median(times)
    return out


BROWSER_PAGES = {
    "overview": ("", "Overview", ["Where the GPU hours went", "GPU hours per day", "Top users"]),
    "cdfs": ("cdfs", "Utilization CDFs", ["CDF of job GPU utilization (mean)",
             "CDF of job GPU utilization (max)", "Per-minute GPU utilization by job size"]),
    "waste": ("waste", "Waste tables", ["Idle-slot and never-used GPU time",
              "% of GPU time in stable phases"]),
    "job": ("job?job={job}", "Job", ["GPU utilization and memory per GPU"]),
    "sql": ("sql", "SQL", []),
}  # fmt: skip


def bench_browser(data_dir: Path, job_id: str) -> dict[str, tuple[float, ...]]:
    """Per page: (cold load: the first page a new browser opens on a fresh server, with the
    server's and the browser's start-up work; restarted server: a new tab of a browser that has
    the app's files, on a server just started; new tab: the page in a new tab of a browser that
    has the app's files cached, on a running server, its queries not yet cached; cold switch: the
    page opened from the sidebar in an open dashboard, its queries not yet cached; warm switch:
    the same again, cached)."""
    from harness.browser import browser_page, dashboard_server, wait_for_charts
    from harness.components import free_port

    out = {}
    log = Path(tempfile.mkdtemp()) / "dashboard.log"

    def until_drawn(page: Any, titles: list[str]) -> None:
        if titles:
            wait_for_charts(page, titles, timeout_s=120, poll_ms=25)
        else:
            page.locator('[data-testid="stDataFrame"]').first.wait_for(timeout=120_000)

    def switch(page: Any, url: str, path: str, title: str, titles: list[str]) -> float:
        # from the SQL page (no chart), to the page by its sidebar link (same session)
        if "?" in path:  # the Job page needs its job in the URL: a reload in the same browser
            t0 = time.perf_counter()
            page.goto(f"{url}/{path}")
        else:
            page.get_by_role("link", name="SQL", exact=True).first.click()
            page.get_by_role("heading", name="SQL", exact=True).first.wait_for(timeout=60_000)
            page.locator('[data-testid="stDataFrame"]').first.wait_for(timeout=60_000)
            t0 = time.perf_counter()
            page.get_by_role("link", name=title, exact=True).first.click()
        page.get_by_role("heading", name=title, exact=True).first.wait_for(timeout=60_000)
        until_drawn(page, titles)
        return time.perf_counter() - t0

    for name, (path, title, titles) in BROWSER_PAGES.items():
        path = path.format(job=job_id)
        # cold load: a fresh server and browser open this page first
        with dashboard_server(data_dir, log) as url, browser_page() as page:
            t0 = time.perf_counter()
            page.goto(f"{url}/{path}")
            until_drawn(page, titles)
            cold_load = time.perf_counter() - t0
        # new tab: the browser has the app's files; the server has run another page's session
        with dashboard_server(data_dir, log) as url, browser_page() as first:
            first.goto(f"{url}/sql")
            until_drawn(first, [])
            page = first.context.new_page()
            t0 = time.perf_counter()
            page.goto(f"{url}/{path}")
            until_drawn(page, titles)
            new_tab = time.perf_counter() - t0
        # restart: the browser has the app's files (its cache is per address), the server has
        # just started and run nothing: the first visit after `gpuwaste dashboard` is restarted
        port = free_port()
        with browser_page() as first:
            with dashboard_server(data_dir, log, port=port) as url:
                first.goto(f"{url}/sql")
                until_drawn(first, [])
            with dashboard_server(data_dir, log, port=port) as url:
                page = first.context.new_page()
                t0 = time.perf_counter()
                page.goto(f"{url}/{path}")
                until_drawn(page, titles)
                restarted = time.perf_counter() - t0
        # switches: a fresh server; the session first opens another chart page (the browser
        # loads the chart library once per session), then the SQL page, then this one
        with dashboard_server(data_dir, log) as url, browser_page() as page:
            other, other_titles = (
                ("cdfs", BROWSER_PAGES["cdfs"][2]) if name == "overview"
                else ("", BROWSER_PAGES["overview"][2])
            )  # fmt: skip
            page.goto(f"{url}/{other}")
            until_drawn(page, other_titles)
            cold = switch(page, url, path, title, titles)
            warm = switch(page, url, path, title, titles)
        out[name] = (cold_load, restarted, new_tab, cold, warm)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--data-dir", type=Path, default=None)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="keep the warehouse")
    ap.add_argument("--no-browser", action="store_true")
    ap.add_argument("--browser-only", action="store_true", help="skip steps 2-3")
    args = ap.parse_args()
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="gpuwaste-bench-")) / "data"
    try:
        t0 = time.perf_counter()
        if (data_dir / "parquet" / "job_usage").is_dir():
            from harness.result_warehouse import Built  # noqa: F401

            con = read_only_connection(data_dir)
            n = con.sql("SELECT count(*) FROM job_usage").fetchall()[0][0]
            job_id = con.sql(
                "SELECT DISTINCT job_id FROM gpu_samples ORDER BY job_id LIMIT 1"
            ).fetchall()[0][0]
            con.close()
            print(f"reusing {data_dir}: {n:,} jobs")
        else:
            built = build_result_warehouse(data_dir, n_jobs=args.jobs, drill_jobs=20)
            n, job_id = built.jobs.height, built.drill_jobs[0]
            del built
            print(f"built {n:,} jobs in {time.perf_counter() - t0:.1f} s at {data_dir}")
        print(f"load average at the start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        size = sum(p.stat().st_size for p in (data_dir / "parquet").rglob("*.parquet"))
        print(f"warehouse: {size / 1e6:.0f} MB of parquet")
        pages = list(BROWSER_PAGES)
        qt = dict.fromkeys(pages, float("nan"))
        at = dict.fromkeys(pages, float("nan"))
        if not args.browser_only:
            qt = bench_queries(data_dir, job_id, args.repeat)
            at = bench_apptest(data_dir, job_id, args.repeat)
        br = {} if args.no_browser else bench_browser(data_dir, job_id)
        print(f"\n{n:,} jobs; seconds; median of {args.repeat} for queries and page script\n")
        print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores\n")
        print("| page | queries, cold | page script (AppTest), cold | browser: fresh browser, fresh "
              "server | browser: new tab, server just started | browser: new tab, running server "
              "| browser: page switch, cold cache | browser: page switch, warm |")  # fmt: skip
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for name in qt:
            b = br.get(name)
            bs = " | ".join(f"{x:.2f}" for x in b) if b else "- | - | - | - | -"
            q_, a_ = (f"{x:.2f}" if x == x else "-" for x in (qt[name], at[name]))  # nan: skipped
            print(f"| {name} | {q_} | {a_} | {bs} |")
    finally:
        if not args.keep and args.data_dir is None:
            shutil.rmtree(data_dir.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
