"""Benchmark: does every dashboard page open within 2 s on a warehouse of 1 M jobs, the very
first visit after a server start included?

    .venv/bin/python bench/dashboard.py [--jobs 1000000] [--data-dir D] [--keep] [--no-browser]
        [--browser-only] [--pages overview,queue] [--floor 5] [--floor-kinds] [--floor-only]

1. writes a synthetic result warehouse of that many jobs (bench/harness/result_warehouse.py:
   every result table the pages read, ~3 GPUs per job, idle slots and phases for every GPU, the
   queue's waits and the failed attempts, samples for a few drill-down jobs), or reuses the one
   at --data-dir;
2. per page of the app (gpuwaste/dashboard/pages.py, every one), times the whole page script
   headless (streamlit AppTest: queries + figures) with the caches cleared, and notes the charts
   and tables it draws (what the browser then waits for);
3. per page, times a real browser (Debian's chromium, against the dashboard's server with its
   page runs and queries timed, harness/timed_server.py) from navigation until every chart the
   page script drew has its marks, its tables are there and the app is idle: the first page of
   a fresh browser on a freshly started server; the page in a new tab of a browser that has the
   app's files cached, on a server just (re)started; the same on a running server, its queries
   not yet cached (an operator opening the dashboard in the morning); a switch to the page from
   the sidebar with its queries not yet cached; the same switch again (cached).
   Beside each time: the server's CPU seconds during the visit (its process group's), which a
   loaded machine inflates far less than the wall time, and for the first visits the browser
   tab's main-thread task and script seconds (Chrome's Performance metrics through CDP).
4. the floor (--floor rounds): new tabs of one browser, alternated, of a trivial page (a heading
   and a line of text) served by the dashboard's own server and of each page on a running
   dashboard whose queries are cached: what a new tab costs that Streamlit itself does not.
   --floor-kinds adds a floor page per element kind (a chart, one and four tables, a static
   table, figure tiles, the sidebar's filters, in the sidebar or in its popover); --floor-only
   runs the floor alone.

Prints markdown tables for bench/RESULTS.md. Median of --repeat runs for step 2.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

from harness.result_warehouse import build_result_warehouse  # noqa: E402

from gpuwaste.config import DATA_DIR_ENV  # noqa: E402
from gpuwaste.dashboard.pages import JOB, PAGES, SQL, Page  # noqa: E402
from gpuwaste.dashboard.server import WARM_THREAD  # noqa: E402
from gpuwaste.warehouse.readonly import read_only_connection  # noqa: E402

APP = REPO / "gpuwaste" / "dashboard" / "app.py"
DEFAULT = next(p for p in PAGES if p.default)
BY_PATH = {p.url_path: p for p in PAGES}


@dataclass
class Drawn:
    """What a page's script drew headless: chart titles and how many tables (outside its
    expanders, which open collapsed)."""

    charts: list[str] = field(default_factory=list)
    tables: int = 0


def median_time(fn: Callable[[], None], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def url_of(page: Page, job_id: str) -> str:
    """The page's address below the server's (the default page is the server's own: Streamlit
    serves it at `/` only); the Job page opens a job of the warehouse."""
    if page.default:
        return ""
    return f"{page.url_path}?job={job_id}" if page.url_path == JOB else page.url_path


def bench_apptest(
    data_dir: Path, job_id: str, repeat: int, pages: list[Page]
) -> tuple[dict[str, float], dict[str, Drawn]]:
    """Per page: the median time of its script run headless with the caches cleared, and what
    it drew."""
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    os.environ[DATA_DIR_ENV] = str(data_dir)
    times: dict[str, float] = {}
    drawn: dict[str, Drawn] = {}
    for page in pages:
        runs = []
        for _ in range(repeat):
            st.cache_data.clear()
            st.cache_resource.clear()
            at = AppTest.from_file(str(APP), default_timeout=300)
            if page.url_path == JOB:
                at.query_params["job"] = job_id
            if not page.default:
                # switch_page needs one run first (the default page); time only the page's own
                at.run()
                st.cache_data.clear()
                st.cache_resource.clear()
                at.switch_page(f"views/{page.script}")
            t0 = time.perf_counter()
            at.run()
            runs.append(time.perf_counter() - t0)
            assert not at.exception, [e.value for e in at.exception]
        times[page.url_path] = statistics.median(runs)
        # a collapsed expander's charts and tables are not drawn in the browser until opened
        hidden = [c.proto.spec for e in at.expander for c in e.get("vega_lite_chart")]
        drawn[page.url_path] = Drawn(
            charts=[
                json.loads(c.proto.spec)["title"]["text"]
                for c in at.get("vega_lite_chart")
                if c.proto.spec not in hidden
            ],
            tables=len(at.dataframe) - sum(len(e.dataframe) for e in at.expander),
        )
    return times, drawn


TABLES_JS = "() => document.querySelectorAll('[data-testid=\"stDataFrame\"]').length"


def until_drawn(page: Any, heading: str, drawn: Drawn, timeout_s: float = 300) -> None:
    """Until the page's heading shows, every chart its script drew has marks, its tables are
    there and the app is idle (polled every 25 ms)."""
    from harness.browser import wait_for_charts

    page.get_by_role("heading", name=heading, exact=True).first.wait_for(timeout=timeout_s * 1000)
    deadline = time.monotonic() + timeout_s
    while page.evaluate(TABLES_JS) < drawn.tables:
        if time.monotonic() > deadline:
            raise AssertionError(f"{heading}: fewer than {drawn.tables} tables")
        page.wait_for_timeout(25)
    wait_for_charts(page, drawn.charts, timeout_s=timeout_s, poll_ms=25)


@dataclass
class Visit:
    """One page opened in the browser: wall seconds, the server's CPU seconds meanwhile, the
    tab's main-thread task and script seconds (null where not taken), and how many of the
    page's queries the server ran for it (cache misses)."""

    wall_s: float
    server_cpu_s: float
    task_s: float | None = None
    script_s: float | None = None
    queries: int = 0


class Server:
    """A timed dashboard server (harness/timed_server.py): its URL, process group and log."""

    def __init__(self, url: str, pgid: int, timing: Path) -> None:
        self.url, self.pgid, self.timing = url, pgid, timing

    def cpu_s(self) -> float:
        from harness.browser import group_cpu_s

        return group_cpu_s(self.pgid)

    def wait_warm(self, timeout_s: float = 300) -> dict[str, Any]:
        """The start-up warm-up's line of the log, once it has finished."""
        deadline = time.monotonic() + timeout_s
        while True:
            done = [x for x in self.lines() if x["kind"] == "warm"]
            if done:
                return done[0]
            if time.monotonic() > deadline:
                raise AssertionError(f"no warm-up recorded in {timeout_s} s")
            time.sleep(0.1)

    def lines(self) -> list[dict[str, Any]]:
        if not self.timing.exists():
            return []
        return [json.loads(x) for x in self.timing.read_text().splitlines() if x]


@contextmanager
def timed_server(
    data_dir: Path, folder: Path, port: int | None = None, app: Path | None = None
) -> Iterator[Server]:
    from harness.browser import dashboard_server

    timing = Path(tempfile.mkstemp(dir=folder, suffix=".jsonl")[1])
    pid: list[int] = []
    with dashboard_server(data_dir, folder / "dashboard.log", port=port, timing_log=timing,
                          pid=pid, timeout_s=120, app=app) as url:  # fmt: skip
        yield Server(url, pid[0], timing)


# The floor: what Streamlit itself costs a new tab, pages served by the dashboard's own server (its
# options, its imports; no warehouse, so no warm-up): a heading and a line of text; the same with
# one small Vega-Lite chart and one table (Streamlit loads its chart and table code on first use).
# --floor-kinds adds a page per element kind the dashboard's pages draw, each beside a heading:
# what each kind adds to a new tab.
_ROWS = "rows = [{'x': c, 'y': v} for c, v in zip('abcdef', [1, 3, 2, 5, 4, 6])]\n"
_CHART = (
    "st.vega_lite_chart({'title': 'Floor', 'data': {'values': rows}, 'mark': 'bar',\n"
    "    'encoding': {'x': {'field': 'x', 'type': 'nominal'},\n"
    "                 'y': {'field': 'y', 'type': 'quantitative'}}}, alt='Floor')\n"
)
FLOORS: dict[str, tuple[str, Drawn]] = {
    "a heading": ("st.title('a heading')\nst.write('One line of text.')\n", Drawn()),
    "a heading, a chart and a table": (
        f"st.title('a heading, a chart and a table')\n{_ROWS}{_CHART}st.dataframe(rows)\n",
        Drawn(charts=["Floor"], tables=1),
    ),
}


def _navigation(heading: str, icons: bool) -> str:
    """A floor page in a navigation like the dashboard's (app.py: its pages in the sidebar, with
    or without their Material icons), the page a heading and a line of text."""
    others = [p for p in PAGES if not p.default]
    defs = "".join(f"def {p.url_path}():\n    pass\n" for p in others)
    pages = ", ".join(
        f"st.Page({p.url_path}, title={p.title!r}, url_path={p.url_path!r}"
        + (f", icon={p.icon!r}" if icons else "")
        + ")"
        for p in others
    )
    icon = f", icon={DEFAULT.icon!r}" if icons else ""
    return (
        "st.set_page_config(page_title='floor', layout='wide')\n"
        f"def first():\n    st.title({heading!r})\n    st.write('One line of text.')\n{defs}"
        f"st.navigation([st.Page(first, title={DEFAULT.title!r}, default=True{icon}), "
        f"{pages}]).run()\n"
    )


# the dashboard's filters (widgets.sidebar_filters), each line indented for a `with` block (the
# body imports `datetime as dt` first)
_FILTERS = (
    "    st.selectbox('Cluster', ['demo', 'other'], key='cluster', bind='query-params')\n"
    "    st.multiselect('Virtual cluster', ['a', 'b'], placeholder='all VCs', key='vc',\n"
    "                   bind='query-params')\n"
    "    st.slider('Period (UTC days)', value=(dt.date(2026, 1, 1), dt.date(2026, 1, 9)),\n"
    "              min_value=dt.date(2026, 1, 1), max_value=dt.date(2026, 1, 9),\n"
    "              key='period', bind='query-params', format='YYYY-MM-DD', help='Days.')\n"
    "    st.text_input('User', placeholder='all users', key='user', bind='query-params')\n"
    "    st.multiselect('Job size (GPUs)', ['1', '2-4'], placeholder='all sizes', key='size',\n"
    "                   bind='query-params')\n"
    "    st.multiselect('Final state', ['passed', 'failed'], placeholder='all states',\n"
    "                   key='state', bind='query-params')\n"
    "    st.caption('The view lives in the URL.')\n"
)
NAVIGATION = f"a heading in the navigation of {len(PAGES)} pages"
KINDS: dict[str, tuple[str, Drawn]] = {
    "a heading and a chart": (
        f"st.title('a heading and a chart')\n{_ROWS}{_CHART}",
        Drawn(charts=["Floor"]),
    ),
    "a heading and a table (st.dataframe)": (
        f"st.title('a heading and a table (st.dataframe)')\n{_ROWS}st.dataframe(rows)\n",
        Drawn(tables=1),
    ),
    "a heading and four tables (st.dataframe)": (
        f"st.title('a heading and four tables (st.dataframe)')\n{_ROWS}"
        "for _ in range(4):\n    st.dataframe(rows)\n",
        Drawn(tables=4),
    ),
    "a heading and a static table (st.table)": (
        f"st.title('a heading and a static table (st.table)')\n{_ROWS}st.table(rows)\n",
        Drawn(),
    ),
    "a heading and three figure tiles (st.metric)": (
        "st.title('a heading and three figure tiles (st.metric)')\n"
        "for c in st.columns(3):\n    c.metric('Waits', '1,234 waits', help='A tile.')\n",
        Drawn(),
    ),
    NAVIGATION + " with icons": (_navigation(NAVIGATION + " with icons", icons=True), Drawn()),
    NAVIGATION: (_navigation(NAVIGATION, icons=False), Drawn()),
    "a heading and the sidebar filters": (
        "st.title('a heading and the sidebar filters')\n"
        "import datetime as dt\n"
        "with st.sidebar:\n"
        "    st.header('Filters')\n"
        f"{_FILTERS}",
        Drawn(),
    ),
    # the dashboard's own (widgets.sidebar_filters): a new tab builds them only once opened
    "a heading and the filters in a sidebar popover": (
        "st.title('a heading and the filters in a sidebar popover')\n"
        "import datetime as dt\n"
        "with st.sidebar.popover('Filters', width='stretch'):\n"
        f"{_FILTERS}",
        Drawn(),
    ),
}


def bench_floor(
    data_dir: Path,
    job_id: str,
    pages: list[Page],
    drawn: dict[str, Drawn],
    repeat: int,
    floors: dict[str, tuple[str, Drawn]],
) -> dict[str, list[Visit]]:
    """New tabs of one browser, alternated: each of `floors` and each page of `pages` on a
    running dashboard (its warm-up done, the page visited once before: its queries cached),
    `repeat` rounds. What a new tab of a page costs beyond Streamlit's own."""
    from harness.browser import browser_page

    folder = Path(tempfile.mkdtemp(prefix="gpuwaste-bench-floor-"))
    out: dict[str, list[Visit]] = {
        **{name: [] for name in floors},
        **{p.url_path: [] for p in pages},
    }
    try:
        with contextlib.ExitStack() as stack:
            servers = {}
            for i, (name, (body, _)) in enumerate(floors.items()):
                (folder / str(i)).mkdir()
                app = folder / str(i) / "floor.py"
                app.write_text(f"import streamlit as st\n\n{body}")
                servers[name] = stack.enter_context(
                    timed_server(folder / "no-warehouse", folder / str(i), app=app)
                )
            server = stack.enter_context(timed_server(data_dir, folder))
            first = stack.enter_context(browser_page())
            server.wait_warm()

            def tabs(metrics: bool) -> None:
                for name, (_, seen) in floors.items():
                    tab = first.context.new_page()
                    v = visit(servers[name], tab, "", name, seen, metrics=metrics)
                    if metrics:
                        out[name].append(v)
                    tab.close()
                for p in pages:
                    tab = first.context.new_page()
                    v = visit(server, tab, url_of(p, job_id), p.title, drawn[p.url_path],
                              metrics=metrics)  # fmt: skip
                    if metrics:
                        out[p.url_path].append(v)
                    tab.close()

            tabs(metrics=False)  # the browser caches each one's files, the pages' queries run
            for _ in range(repeat):
                tabs(metrics=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return out


def visit(server: Server, page: Any, path: str, heading: str, drawn: Drawn,
          click: str | None = None, metrics: bool = False) -> Visit:  # fmt: skip
    """Open `path` (or click the sidebar link `click`) and wait until drawn."""
    cdp = None
    if metrics:
        cdp = page.context.new_cdp_session(page)
        cdp.send("Performance.enable")
    seen = len(server.lines())
    cpu0 = server.cpu_s()
    t0 = time.perf_counter()
    if click:
        page.get_by_role("link", name=click, exact=True).first.click()
    else:
        page.goto(f"{server.url}/{path}")
    until_drawn(page, heading, drawn)
    wall = time.perf_counter() - t0
    out = Visit(wall, server.cpu_s() - cpu0)
    out.queries = sum(
        1 for x in server.lines()[seen:] if x["kind"] == "query" and x["thread"] != WARM_THREAD
    )
    if cdp is not None:
        m = {x["name"]: x["value"] for x in cdp.send("Performance.getMetrics")["metrics"]}
        out.task_s, out.script_s = m.get("TaskDuration"), m.get("ScriptDuration")
    return out


SCENARIOS = (
    "fresh browser, fresh server",
    "new tab, server just started",
    "new tab, running server",
    "page switch, cold cache",
    "page switch, warm",
)


def bench_browser(
    data_dir: Path, job_id: str, pages: list[Page], drawn: dict[str, Drawn]
) -> dict[str, list[Visit]]:
    """Per page, a Visit per SCENARIOS."""
    from harness.browser import browser_page
    from harness.components import free_port

    folder = Path(tempfile.mkdtemp(prefix="gpuwaste-bench-dashboard-"))
    sql = BY_PATH[SQL]
    out: dict[str, list[Visit]] = {}
    for p in pages:
        path, seen = url_of(p, job_id), drawn[p.url_path]
        # the very first visit: a fresh browser on a server just started
        with timed_server(data_dir, folder) as server, browser_page() as page:
            fresh = visit(server, page, path, p.title, seen, metrics=True)
        # a browser with the app's files (its cache is per address) on a server just restarted
        port = free_port()
        with browser_page() as first:
            with timed_server(data_dir, folder, port=port) as server:
                visit(server, first, sql.url_path, sql.title, drawn[SQL])
            with timed_server(data_dir, folder, port=port) as server:
                restarted = visit(server, first.context.new_page(), path, p.title, seen,
                                  metrics=True)  # fmt: skip
        # a new tab on a running server that has served another page (its queries not cached)
        with timed_server(data_dir, folder) as server, browser_page() as first:
            server.wait_warm()  # it has run a while: its start-up warm-up is done
            visit(server, first, sql.url_path, sql.title, drawn[SQL])
            new_tab = visit(server, first.context.new_page(), path, p.title, seen, metrics=True)
        # switches: the session opens another chart page first, then the SQL page, then this one
        # (the Job page needs its job in the URL: a reload in the same tab)
        with timed_server(data_dir, folder) as server, browser_page() as page:
            other = BY_PATH["cdfs"] if p.default else DEFAULT
            visit(server, page, url_of(other, job_id), other.title, drawn[other.url_path])
            switches = []
            for _ in range(2):
                visit(server, page, sql.url_path, sql.title, drawn[SQL], click=sql.title)
                if p.url_path == JOB:
                    switches.append(visit(server, page, path, p.title, seen))
                else:
                    switches.append(visit(server, page, path, p.title, seen, click=p.title))
        out[p.url_path] = [fresh, restarted, new_tab, *switches]
        print(f"  {p.title}: " + ", ".join(_cell(v) for v in out[p.url_path]), flush=True)
    shutil.rmtree(folder, ignore_errors=True)
    return out


def warm_up_s(data_dir: Path) -> tuple[float, float]:
    """The server's start-up warm-up alone: its wall seconds, and the server's CPU seconds from
    its start to the warm-up's end (imports included)."""
    folder = Path(tempfile.mkdtemp(prefix="gpuwaste-bench-warm-"))
    try:
        with timed_server(data_dir, folder) as server:
            return server.wait_warm()["wall_s"], server.cpu_s()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _cell(v: Visit) -> str:
    return f"{v.wall_s:.2f} ({v.server_cpu_s:.2f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--data-dir", type=Path, default=None)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="keep the warehouse")
    ap.add_argument("--no-browser", action="store_true")
    ap.add_argument(
        "--browser-only", action="store_true", help="run each page script once, untimed"
    )
    ap.add_argument("--pages", default="", help="url paths, comma-separated (default: every page)")
    ap.add_argument("--floor", type=int, default=5,
                    help="rounds of new tabs, a trivial page's and each page's (0: none)")  # fmt: skip
    ap.add_argument("--floor-kinds", action="store_true",
                    help="add a floor page per element kind (a chart, tables, tiles, filters)")  # fmt: skip
    ap.add_argument("--floor-only", action="store_true",
                    help="no page script timing, warm-up or browser scenarios: only --floor")  # fmt: skip
    args = ap.parse_args()
    pages = [BY_PATH[x] for x in args.pages.split(",") if x] or list(PAGES)
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="gpuwaste-bench-")) / "data"
    try:
        t0 = time.perf_counter()
        if (data_dir / "parquet" / "job_usage").is_dir():
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
        print(f"warehouse: {size / 1e6:.0f} MB of parquet", flush=True)
        # the browser waits for what the scripts drew: the SQL and default pages are visited
        # on the way to the others
        needed = [p for p in PAGES if p in pages or p.url_path == SQL or p.default]
        needed += [BY_PATH["cdfs"]] if DEFAULT in pages and BY_PATH["cdfs"] not in needed else []
        at, drawn = bench_apptest(data_dir, job_id, 1 if args.browser_only else args.repeat,
                                  needed)  # fmt: skip
        for p in needed:
            print(f"  {p.title} draws {drawn[p.url_path]}", flush=True)
        scenarios = not (args.no_browser or args.floor_only)
        warm = warm_up_s(data_dir) if scenarios else None
        br = bench_browser(data_dir, job_id, pages, drawn) if scenarios else {}
        floor = {}
        if args.floor and not args.no_browser:
            floors = {**FLOORS, **(KINDS if args.floor_kinds else {})}
            floor = bench_floor(data_dir, job_id, pages, drawn, args.floor, floors)
        print(f"\n{n:,} jobs; seconds; median of {args.repeat} for the page script")
        print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        if warm:
            print(f"start-up warm-up alone: {warm[0]:.2f} s; the server's CPU from its start to "
                  f"the warm-up's end: {warm[1]:.2f} s")  # fmt: skip
        if br or not args.browser_only:
            print("\nBrowser: wall seconds (the server's CPU seconds meanwhile)\n")
            print("| page | page script (AppTest), cold | " + " | ".join(SCENARIOS) + " |")
            print("| --- " * (len(SCENARIOS) + 2) + "|")
            for p in pages:
                a_ = "-" if args.browser_only else f"{at[p.url_path]:.2f}"
                b = br.get(p.url_path)
                cells = " | ".join(_cell(v) for v in b) if b else " | ".join("-" * len(SCENARIOS))
                print(f"| {p.title} | {a_} | {cells} |")
        if br:
            print("\nFirst visits: the tab's main-thread task / script seconds (Chrome), queries "
                  "the server ran for the visit\n")  # fmt: skip
            print("| page | " + " | ".join(SCENARIOS[:3]) + " |")
            print("| --- " * 4 + "|")
            for p in pages:
                cells = " | ".join(
                    f"{v.task_s:.2f} / {v.script_s:.2f}, {v.queries} queries"
                    for v in br[p.url_path][:3]
                )
                print(f"| {p.title} | {cells} |")
        if floor:
            print(f"\nNew tabs of one browser on running servers, alternated, median of "
                  f"{args.floor}: wall seconds (server CPU), the tab's main-thread task / script "
                  "seconds\n")  # fmt: skip
            print("| page | new tab | Chrome task / script |\n| --- | --- | --- |")
            for key, visits in floor.items():
                title = BY_PATH[key].title if key in BY_PATH else key
                med = {a: statistics.median(float(getattr(v, a) or 0) for v in visits)
                       for a in ("wall_s", "server_cpu_s", "task_s", "script_s")}  # fmt: skip
                print(
                    f"| {title} | {med['wall_s']:.2f} ({med['server_cpu_s']:.2f}) | "
                    f"{med['task_s']:.2f} / {med['script_s']:.2f} |"
                )
    finally:
        if not args.keep and args.data_dir is None:
            shutil.rmtree(data_dir.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
