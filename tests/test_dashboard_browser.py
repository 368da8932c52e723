"""The dashboard in a real browser: `gpuwaste dashboard` on a free loopback port, Debian's
chromium driven by Playwright. Every page is visited; each expected chart must be drawn, with marks,
no exception box may appear, and a screenshot of each page is saved in the test's output folder
(or in $GPUWASTE_SCREENSHOT_DIR, which is how docs/screenshots are made).

Which warehouse the pages read is decided by the `warehouse` fixture alone.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness.browser import (
    chart_layout,
    charts,
    dashboard_session,
    metrics,
    overlapping,
    require_browser,
    screenshot,
    screenshot_dir,
    table_with,
    tables,
    visit,
    wait_for_charts,
    words,
)
from harness.result_warehouse import build_demo_warehouse, build_result_warehouse

from gpuwaste.dashboard.pages import JOB, SQL, Page
from gpuwaste.dashboard.pages import PAGES as DASHBOARD_PAGES
from gpuwaste.warehouse.readonly import read_only_connection
from gpuwaste.warehouse.schema import all_tables

pytestmark = [pytest.mark.browser, pytest.mark.slow]

# Switch to "demo" once `gpuwaste demo --no-serve` writes the result tables (one line to change).
WAREHOUSE = os.environ.get("GPUWASTE_DASHBOARD_WAREHOUSE", "built")


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_browser()
    d = tmp_path_factory.mktemp("dashboard") / "data"
    if WAREHOUSE == "demo":
        build_demo_warehouse(d)
    else:
        build_result_warehouse(d, n_jobs=800, seed=5)
    return d


@pytest.fixture(scope="module")
def session(warehouse: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any]]:
    with dashboard_session(warehouse, tmp_path_factory) as (url, page):
        yield url, page


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return screenshot_dir(tmp_path_factory)


def _busiest_job(warehouse: Path) -> str:
    con = read_only_connection(warehouse)
    try:
        rows = con.sql(
            "SELECT u.job_id FROM job_usage u WHERE u.gpus BETWEEN 2 AND 8 "
            "AND u.cluster = (SELECT min(cluster) FROM job_usage) "
            "AND EXISTS (SELECT 1 FROM idle_slots s WHERE s.cluster = u.cluster "
            "            AND s.job_id = u.job_id) "
            "AND EXISTS (SELECT 1 FROM gpu_samples g WHERE g.cluster = u.cluster "
            "            AND g.job_id = u.job_id) "
            "ORDER BY u.never_used_gpus DESC, u.duration_s < 43200 DESC, u.job_id LIMIT 1"
        ).fetchall()
    finally:
        con.close()
    assert rows, "no job with idle slots in the warehouse"
    return str(rows[0][0])


# the charts a page must draw (a page not named here must draw none in particular)
CHARTS: dict[str, list[str]] = {
    "overview": ["Where the GPU hours went", "GPU hours per day", "Top users by GPU hours lost"],
    "cdfs": [
        "CDF of job GPU utilization (mean)",
        "CDF of job GPU utilization (max)",
        "Per-minute GPU utilization by job size",
        "Per-minute GPU utilization by final status",
    ],
    "waste": [
        "Idle-slot and never-used GPU time",
        "Jobs with at least one never-used GPU",
        "% of GPU time in stable phases",
    ],
    JOB: ["GPU utilization and memory per GPU"],
}


def _url(page: Page) -> str:
    """Where the test opens a page: `/` for the default, the Job page on the busiest job."""
    if page.default:
        return ""
    return f"{JOB}?job={{job}}" if page.url_path == JOB else page.url_path


# every page of the dashboard (gpuwaste/dashboard/pages.py), in the sidebar's order
PAGES = [(_url(p), p.title, CHARTS.get(p.url_path, [])) for p in DASHBOARD_PAGES]


def test_the_expected_charts_name_pages_of_the_dashboard() -> None:
    assert set(CHARTS) <= {p.url_path for p in DASHBOARD_PAGES}


@pytest.mark.parametrize(("path", "title", "expected"), PAGES, ids=[p[1] for p in PAGES])
def test_every_page_renders_its_charts(
    session: tuple[str, Any],
    warehouse: Path,
    shots: Path,
    path: str,
    title: str,
    expected: list[str],
) -> None:
    url, page = session
    target = f"{url}/{path.format(job=_busiest_job(warehouse))}"
    found = visit(page, target, title, expected)
    for want in expected:
        match = [c for c in found if c["title"].startswith(want)]
        assert match and all(c["marks"] > 0 for c in match), (want, found)
    if path == SQL:
        grid = page.locator('[data-testid="stDataFrame"]')
        grid.first.wait_for(timeout=30_000)
    name = (path.split("?")[0] or "overview").replace("/", "_")
    screenshot(page, shots, name)  # the page's top, before the checks below scroll it
    if path != SQL:
        _reads_as_words_for_people(page)
    _tiles_carry_their_unit(page, title)


# internal table names (util_minute_hist, job_usage, ...): a caption for people names none
INTERNAL = re.compile(r"\b(" + "|".join(n for n in all_tables() if "_" in n) + r")\b")


def _reads_as_words_for_people(page: Any) -> None:
    """No caption names an internal table, no column title is snake_case, and every chart's
    title lies inside its frame (a title above it is cut off)."""
    grids = page.locator('[data-testid="stDataFrame"]:visible')
    said = words(page)
    for _ in range(120):
        if said["headers"] or not grids.count():
            break
        # a table draws its header once in view; a page still drawing (a loaded machine) may
        # move it out of view again, so each try scrolls them back
        for i in range(grids.count()):
            grids.nth(i).scroll_into_view_if_needed()
        page.wait_for_timeout(250)
        said = words(page)
    assert [c for c in said["captions"] if INTERNAL.search(c)] == []
    assert said["headers"] or not grids.count()
    assert [h for h in said["headers"] if "_" in h] == []
    assert [t["title"] for t in said["titles"] if t["above"] > 0] == [], said["titles"]


# a tile's figure with its unit: "466 GPU h", "12 jobs", "3.5 h", "41.2%", "1,024.5 kWh"; "-"
# where there is nothing to divide
TILE_VALUE = re.compile(r"-|[\d,]+(\.\d+)?(%| [A-Za-z].*)")


def _tiles_carry_their_unit(page: Any, title: str) -> None:
    """Every figure tile says what it counts ("30" alone reads as 30 GPUs, or 30 hours); on the
    Overview, GPU hours read as GPU hours and busy vs utilization is explained next to them."""
    tiles = metrics(page)
    assert [(k, v) for k, v in tiles.items() if not TILE_VALUE.fullmatch(v)] == [], title
    if title != "Overview":
        return
    for label in ("GPU hours allocated", "Busy (not idle)", "Idle slots", "Never-used GPUs",
                  "No data"):  # fmt: skip
        assert re.fullmatch(r"[\d,]+ GPU h", tiles[label]), (label, tiles[label])
    assert re.fullmatch(r"[\d.]+%", tiles["GPU utilization (time-weighted mean)"]), tiles
    assert any("Busy" in c and "utilization" in c and "time" in c for c in words(page)["captions"])


def _first_vc(warehouse: Path) -> str:
    con = read_only_connection(warehouse)
    try:
        return str(con.sql("SELECT min(vc) FROM job_usage WHERE cluster = (SELECT min(cluster) "
                           "FROM job_usage)").fetchall()[0][0])  # fmt: skip
    finally:
        con.close()


def test_a_link_reproduces_the_view(session: tuple[str, Any], warehouse: Path) -> None:
    url, page = session
    vc = _first_vc(warehouse)
    visit(page, f"{url}/cdfs?vc={vc}&threshold=30&resource=CPU", "Utilization CDFs",
           ["CDF of job CPU utilization (mean)"])  # fmt: skip
    names = charts(page)[0]["legend"]
    assert len(names) == 2, names
    assert names[0].startswith(f"{vc} (") and names[1].startswith("(all) (")
    assert all("≤ 30" in n for n in names)
    # The URL keeps the view as the operator changes it.
    assert "vc=" in page.url and "threshold=30" in page.url


def test_the_filters_open_from_the_sidebar_and_stay_open_while_set(
    session: tuple[str, Any], warehouse: Path
) -> None:
    """The filters are in a popover (a new tab does not build them until it opens): opened,
    a VC chosen, the page follows, the URL keeps it and the popover stays open for the next."""
    url, page = session
    vc = _first_vc(warehouse)
    visit(page, f"{url}/", "Overview", ["Where the GPU hours went"])
    sizes = page.get_by_text("Job size (GPUs)", exact=True)
    assert sizes.count() == 0  # closed: not built
    page.locator('[data-testid="stSidebar"]').get_by_role("button", name="Filters").click()
    sizes.first.wait_for(timeout=30_000)
    box = page.locator('[data-testid="stMultiSelect"]').filter(has_text="Virtual cluster")
    box.locator("input").click()
    page.keyboard.type(vc)
    page.get_by_role("option", name=vc, exact=True).click()
    page.wait_for_url(lambda u: f"vc={vc}" in u, timeout=30_000)
    page.get_by_text(re.compile(f"; VC {re.escape(vc)}$")).first.wait_for(timeout=30_000)
    assert sizes.first.is_visible()  # still open


def test_selecting_a_job_row_opens_the_job(session: tuple[str, Any], warehouse: Path) -> None:
    url, page = session
    vc = _first_vc(warehouse)
    visit(page, f"{url}/?vc={vc}", "Overview", ["Top users by GPU hours lost"])
    before = [c["title"] for c in charts(page)]
    grid = page.locator('[data-testid="stDataFrame"]').nth(1)  # top users, then top jobs
    grid.scroll_into_view_if_needed()
    box = grid.bounding_box()
    assert box is not None
    # The row-selection checkbox of the first data row (header row is ~35 px high).
    page.mouse.click(box["x"] + 16, box["y"] + 35 + 17)
    page.get_by_role("heading", name="Job", exact=True).first.wait_for(timeout=30_000)
    after = wait_for_charts(page, ["GPU utilization and memory per GPU"])
    page.wait_for_url("**job=*", timeout=10_000)
    assert f"vc={vc}" in page.url  # the filters travel with the job
    assert [c["title"] for c in after] != before


def _user_with_few_jobs(warehouse: Path) -> tuple[str, int, float]:
    """A user with 3 to 8 jobs (so that the top-jobs table shows them all), their job count and
    their allocated GPU hours."""
    con = read_only_connection(warehouse)
    try:
        user, jobs = con.sql(
            'SELECT "user", count(*) FROM job_usage GROUP BY ALL HAVING count(*) BETWEEN 3 AND 8 '
            'AND "user" NOT LIKE \'%<%\' ORDER BY count(*) DESC, "user" LIMIT 1'
        ).fetchall()[0]
        (alloc,) = con.sql(
            "SELECT sum(g.alloc_s) / 3600 FROM job_gpu_usage g JOIN job_usage j "
            'ON g.cluster = j.cluster AND g.job_id = j.job_id WHERE j."user" = ?',
            params=[user],
        ).fetchall()[0]
    finally:
        con.close()
    return str(user), int(jobs), float(alloc)


def _number(text: str) -> float:
    return float(text.replace(",", "").removesuffix(" GPU h").rstrip("%"))


def test_a_user_filter_sets_the_headline(session: tuple[str, Any], warehouse: Path) -> None:
    url, page = session
    visit(page, f"{url}/", "Overview", ["Where the GPU hours went"])
    everyone = metrics(page)
    user, jobs, alloc = _user_with_few_jobs(warehouse)
    visit(page, f"{url}/?user={user}", "Overview", ["Where the GPU hours went"])
    mine = metrics(page)
    assert _number(mine["GPU hours allocated"]) == pytest.approx(alloc, abs=0.5)
    assert mine["GPU hours allocated"] != everyone["GPU hours allocated"]
    util = "GPU utilization (time-weighted mean)"
    assert mine[util] != everyone[util] and 0 <= _number(mine[util]) <= 100
    top_jobs = table_with(page, "Job id")
    assert top_jobs["rows"] == jobs
    assert {row[top_jobs["header"].index("User")] for row in top_jobs["cells"]} == {user}
    # a filter matching no job says so, and draws no empty chart
    visit(page, f"{url}/?user=nobody-has-this-name", "Overview", [])
    page.get_by_text("No jobs match this view.").first.wait_for(timeout=30_000)
    assert [c["title"] for c in charts(page)] == []


def test_side_by_side_cdfs_have_an_axis_pair_per_panel(
    session: tuple[str, Any], warehouse: Path, shots: Path
) -> None:
    url, page = session
    visit(page, f"{url}/cdfs?side=true", "Utilization CDFs",
           ["CDF of job GPU utilization (mean)", "CDF of job GPU utilization (max)"])  # fmt: skip
    screenshot(page, shots, "cdfs_side_by_side")
    for title in ("CDF of job GPU utilization (mean)", "CDF of job GPU utilization (max)"):
        layout = chart_layout(page, title)
        assert layout is not None
        vcs = len(_vcs(warehouse))
        assert layout["panels"] == vcs + 1  # a panel per VC and one for all
        assert layout["axes"] == 2 * layout["panels"]  # no axis under an empty cell
        assert overlapping(layout["labels"]) == [], layout["labels"]
    # overlaid: the legend lies under the plot, never over a curve
    visit(page, f"{url}/cdfs", "Utilization CDFs", ["CDF of job GPU utilization (mean)"])
    inside = page.evaluate(
        """() => { const el = document.querySelector('[data-testid="stVegaLiteChart"]');
             const plot = el.querySelector('g.role-scope, g.mark-group.role-frame path')
               || el.querySelector('svg'); const lines = el.querySelector('g.role-mark');
             const legend = el.querySelector('g.role-legend');
             const a = lines.getBoundingClientRect(), b = legend.getBoundingClientRect();
             return b.y >= a.y + a.height - 1; }"""
    )
    assert inside, "the legend overlaps the curves"


def test_csv_download_holds_the_rows_shown(
    session: tuple[str, Any], warehouse: Path, tmp_path: Path
) -> None:
    import csv

    url, page = session
    user, jobs, _ = _user_with_few_jobs(warehouse)
    visit(page, f"{url}/?user={user}", "Overview", ["Where the GPU hours went"])
    shown_tables = tables(page)
    index = next(i for i, t in enumerate(shown_tables) if "Job id" in t["header"])
    shown = shown_tables[index]
    top = page.locator('[data-testid="stDataFrame"]').nth(index).bounding_box()
    assert top is not None
    buttons = page.locator('[data-testid="stDownloadButton"] button')
    below = [i for i in range(buttons.count())
             if (buttons.nth(i).bounding_box() or {"y": -1})["y"] > top["y"]]  # fmt: skip
    with page.expect_download(timeout=30_000) as download:
        buttons.nth(below[0]).click()
    path = tmp_path / download.value.suggested_filename
    download.value.save_as(path)
    cluster = _first_cluster(warehouse)
    assert path.name == f"top-jobs_cluster-{cluster}_user-{user}.csv"
    with path.open(newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == shown["header"]
    assert len(rows) - 1 == shown["rows"] == jobs
    for got, want in zip(rows[1:], shown["cells"], strict=True):
        for a, b in zip(got, want, strict=True):
            if b == "" and a in ("true", "false"):
                continue  # a check box shows no text
            try:
                assert float(a) == pytest.approx(float(b.replace(",", "")))
            except ValueError:
                assert a == b


def _vcs(warehouse: Path) -> list[str]:
    con = read_only_connection(warehouse)
    try:
        cluster = _first_cluster(warehouse)
        rows = con.sql("SELECT DISTINCT vc FROM job_usage WHERE cluster = ?", params=[cluster])
        return [str(r[0]) for r in rows.fetchall()]
    finally:
        con.close()


def _first_cluster(warehouse: Path) -> str:
    con = read_only_connection(warehouse)
    try:
        return str(con.sql("SELECT min(cluster) FROM job_usage").fetchall()[0][0])
    finally:
        con.close()


def test_overview_legends_are_whole_on_a_narrow_window(session: tuple[str, Any]) -> None:
    url, page = session
    page.set_viewport_size({"width": 1100, "height": 1100})
    try:
        visit(page, f"{url}/", "Overview", ["Where the GPU hours went", "GPU hours per day"])
        trend = chart_layout(page, "GPU hours per day")
        breakdown = chart_layout(page, "Where the GPU hours went")
    finally:
        page.set_viewport_size({"width": 1500, "height": 1100})
    assert trend is not None and breakdown is not None
    assert [t["text"] for t in trend["legend"]] == [
        "Idle slots", "Never-used GPUs", "No data", "Allocated", "Busy (not idle)"
    ]  # fmt: skip
    assert [t["text"] for t in breakdown["legend"]] == [
        "allocated", "busy", "lost", "allocated, by job kind"
    ]  # fmt: skip
    for chart in (trend, breakdown):
        right = chart["box"]["x"] + chart["box"]["w"]
        cut = [t["text"] for t in chart["legend"] if t["x"] + t["w"] > right + 1]
        assert cut == [], f"legend labels past the chart's edge: {cut}"
