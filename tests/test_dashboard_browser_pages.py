"""The dashboard in a real browser (Debian's chromium through Playwright) over the demo warehouse
(`gpuwaste demo --no-serve`: the generator's files through the real ingest and analyze, which
holds 16-GPU jobs): nothing is fetched from outside the dashboard's own origin on any page; a
16-GPU job is drawn as one heatmap, not 16 stacked panels; the Job page's time axis has one label
format, its memory axis writes MiB as the tables do, and its stable-phase strip covers no axis
label."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from harness.browser import dashboard_session, demo_warehouse, visit, wait_for_charts

from gpuwaste.warehouse.readonly import read_only_connection

pytestmark = [pytest.mark.browser, pytest.mark.slow]

HEATMAP = "GPU utilization, "
PANELS = "GPU utilization and memory per GPU"
# The page's height with the 16-GPU job open (Streamlit's main area): 1,853 px measured with the
# heatmap, 4,011 px with 16 stacked panels before.
MAX_JOB_PAGE_PX = 2_500


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return demo_warehouse(tmp_path_factory)


@pytest.fixture(scope="module")
def session(demo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any]]:
    with dashboard_session(demo, tmp_path_factory) as (url, page):
        yield url, page


def _job(demo: Path, where: str) -> tuple[str, str]:
    con = read_only_connection(demo)
    try:
        rows = con.sql(
            "SELECT u.cluster, u.job_id FROM job_usage u "
            f"WHERE {where} AND EXISTS (SELECT 1 FROM gpu_samples g WHERE g.cluster = u.cluster "
            "AND g.job_id = u.job_id) ORDER BY u.idle_slots DESC, u.cluster, u.job_id LIMIT 1"
        ).fetchall()
    finally:
        con.close()
    assert rows, where
    return str(rows[0][0]), str(rows[0][1])


def _main_height(page: Any) -> int:
    return int(page.evaluate(
        "() => document.querySelector('[data-testid=\"stMain\"]').scrollHeight"
    ))  # fmt: skip


def test_no_request_leaves_the_dashboard(session: tuple[str, Any], demo: Path) -> None:
    """Every request any page makes, over a visit of every page, goes to the dashboard's own
    loopback origin (or is a data: URL): the dashboard works air-gapped."""
    url, page = session
    own = urlsplit(url).netloc
    requests: list[str] = []
    listen = lambda r: requests.append(r.url)  # noqa: E731
    page.on("request", listen)
    try:
        big = _job(demo, "u.gpus = 16")
        small = _job(demo, "u.gpus BETWEEN 2 AND 4")
        for path, title, charts in [
            ("", "Overview", ["Where the GPU hours went"]),
            ("now", "Running now", []),
            ("cdfs", "Utilization CDFs", ["CDF of job GPU utilization (mean)"]),
            ("waste", "Waste tables", ["Idle-slot and never-used GPU time"]),
            (f"job?cluster={big[0]}&job={big[1]}", "Job", [HEATMAP]),
            (f"job?cluster={small[0]}&job={small[1]}", "Job", [PANELS]),
            ("sql?sql=SELECT%2042%20AS%20answer", "SQL", []),
        ]:
            visit(page, f"{url}/{path}", title, charts)
        page.get_by_role("button", name="Run").click()
        page.get_by_text("1 row(s) in").wait_for(timeout=30_000)
        page.wait_for_timeout(1_000)
    finally:
        page.remove_listener("request", listen)
    assert requests
    outside = sorted({r for r in requests if urlsplit(r).scheme != "data"
                      and urlsplit(r).netloc != own})  # fmt: skip
    assert outside == []


def test_a_16_gpu_job_is_one_heatmap(session: tuple[str, Any], demo: Path) -> None:
    url, page = session
    cluster, job = _job(demo, "u.gpus = 16")
    found = visit(page, f"{url}/job?cluster={cluster}&job={job}", "Job", [HEATMAP])
    (heat,) = [c for c in found if c["title"].startswith(HEATMAP)]
    assert heat["marks"] > 16 * 50  # cells drawn for every GPU
    assert not [c for c in found if c["title"].startswith(PANELS)]
    rows = page.evaluate(
        """() => Array.from(document.querySelectorAll(
             '[data-testid="stVegaLiteChart"] g.role-axis-label text')).map(t => t.textContent)"""
    )
    # a row per GPU, named as in `gpuwaste job` (analyses.reads.device_name: host:gpu; a time
    # label such as 14:30 has no letter before its colon)
    device = r"[^:\s]*[A-Za-z][^:\s]*:\d+( — NEVER USED)?"
    assert sum(bool(re.fullmatch(device, r)) for r in rows) == 16
    height = _main_height(page)
    assert height < MAX_JOB_PAGE_PX, height
    # the per-GPU panels come on request, for the GPUs picked
    picker = page.locator('[data-testid="stMain"] [data-testid="stMultiSelect"] input')
    picker.click()
    picker.press("ArrowDown")  # opens the list if the click did not
    page.get_by_role("option").first.click()
    page.keyboard.press("Escape")
    wait_for_charts(page, [PANELS])


AXIS_JS = """
(title) => {
  const el = Array.from(document.querySelectorAll('[data-testid="stVegaLiteChart"]'))
    .find(e => (e.getAttribute('aria-label') || '').startsWith(title));
  const box = n => { const r = n.getBoundingClientRect();
                     return {x: r.left, y: r.top, w: r.width, h: r.height}; };
  return {
    x: Array.from(el.querySelectorAll('g.role-axis')).filter(a =>
         (a.getAttribute('aria-label') || '').startsWith('X-axis'))
       .flatMap(a => Array.from(a.querySelectorAll('g.role-axis-label text')))
       .map(t => t.textContent),
    y: Array.from(el.querySelectorAll('g.role-axis')).filter(a =>
         (a.getAttribute('aria-label') || '').startsWith('Y-axis'))
       .flatMap(a => Array.from(a.querySelectorAll('g.role-axis-label text')))
       .map(t => t.textContent),
    labels: Array.from(el.querySelectorAll('g.role-axis-label text')).map(box),
    strips: Array.from(el.querySelectorAll('g.mark-rect path'))
       .filter(p => p.getAttribute('fill') === '#54A24B').map(box),
  };
}
"""


def _overlap(a: dict[str, float], b: dict[str, float]) -> bool:
    return (a["x"] < b["x"] + b["w"] and b["x"] < a["x"] + a["w"]
            and a["y"] < b["y"] + b["h"] and b["y"] < a["y"] + a["h"])  # fmt: skip


# a job of 2-4 GPUs with a GPU whose stable phases leave part of its time uncovered (a strip over
# a GPU's whole time is not drawn: charts.distinguishing)
SOME_PHASES = (
    "u.gpus BETWEEN 2 AND 4 AND EXISTS (SELECT 1 FROM job_gpu_usage g JOIN (SELECT cluster, "
    "job_id, host, gpu, sum(epoch(end_ts - start_ts)) AS s FROM stable_phases WHERE stable "
    "GROUP BY ALL) p USING (cluster, job_id, host, gpu) WHERE g.cluster = u.cluster AND "
    "g.job_id = u.job_id AND p.s < 0.9 * epoch(g.end_ts - g.start_ts))"
)


@pytest.mark.parametrize("where", ["u.gpus = 16", SOME_PHASES])
def test_one_time_format_and_no_label_under_the_strip(
    session: tuple[str, Any], demo: Path, where: str
) -> None:
    url, page = session
    cluster, job = _job(demo, where)
    big = "16" in where
    visit(page, f"{url}/job?cluster={cluster}&job={job}", "Job", [HEATMAP if big else PANELS])
    got = page.evaluate(AXIS_JS, HEATMAP if big else PANELS)
    assert got["x"], got
    formats = {("date and time" if re.fullmatch(r"[A-Z][a-z]{2} \d\d \d\d:\d\d", t) else
                "time" if re.fullmatch(r"\d\d:\d\d", t) else t) for t in got["x"]}  # fmt: skip
    assert len(formats) == 1 and formats <= {"time", "date and time"}, got["x"]
    if not big:
        # utilization (%) and memory (MiB): plain numbers, thousands separated as in the tables
        # ("50,000", not "50k")
        assert all(re.fullmatch(r"\d{1,3}(,\d{3})*", t) for t in got["y"]), got["y"]
        assert max(int(t.replace(",", "")) for t in got["y"]) >= 1_000, got["y"]  # memory's
        assert got["strips"], "no stable-phase strip drawn"
        hidden = [lab for lab in got["labels"] for s in got["strips"] if _overlap(lab, s)]
        assert hidden == []
