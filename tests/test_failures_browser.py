"""The failures drill-down of the "Queue and failures" page in a real browser (Debian's chromium
through Playwright) over a small generated cluster with job logs (`generate --logs`, read by the
real `ingest slurm`, `ingest logs` and `analyze`): the page's section control opens Table 7 (and
its link reopens it), and choosing a reason lists its failed attempts, each with the log line its
reason was matched on. The demo has no logs
(tests/test_failures_view.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from harness.browser import (
    charts,
    dashboard_session,
    require_browser,
    table_with,
    visit,
    wait_for_charts,
)

from gpuwaste import generate
from gpuwaste.analyses.run import analyze
from gpuwaste.config import ClusterConfig, LogsSource, Settings, SlurmSource
from gpuwaste.ingest.logs.source import ingest_logs
from gpuwaste.ingest.slurm.source import ingest_slurm
from gpuwaste.warehouse.store import Warehouse

pytestmark = [pytest.mark.browser, pytest.mark.slow]

# scroll the grid whose header has the column to its right end
SCROLL_RIGHT_JS = """
(column) => {
  const grid = Array.from(document.querySelectorAll('[data-testid="stDataFrame"]')).find(g =>
    Array.from(g.querySelectorAll('thead th')).some(th => th.innerText.trim() === column));
  const scroller = grid.querySelector('.dvn-scroller');
  scroller.scrollLeft = scroller.scrollWidth;
}
"""
CLUSTER = "logged"
REASON = "import error"  # a planted error whose line is short enough to be read whole


@pytest.fixture(scope="module")
def logged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 16-GPU day with logs, from its sacct.txt and logs/ alone (no telemetry: cheap)."""
    require_browser()
    base = tmp_path_factory.mktemp("logged")
    spec = generate.GeneratorSpec(seed=2, gpus=16, days=1.0, cluster=CLUSTER)
    generate.write_all(spec, base / "out", logs=True)
    cluster = ClusterConfig(
        name=CLUSTER,
        slurm=SlurmSource(file=base / "out" / "sacct.txt"),
        logs=LogsSource(dir=base / "out" / "logs"),
    )
    settings = Settings(data_dir=base / "wh", clusters=[cluster])
    ingest_slurm(settings, cluster)
    ingest_logs(settings, cluster)
    analyze(settings, quiet=True)
    return settings.data_dir


@pytest.fixture(scope="module")
def session(logged: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any]]:
    with dashboard_session(logged, tmp_path_factory) as (url, page):
        yield url, page


def test_a_failed_attempt_shows_its_matched_log_line(
    session: tuple[str, Any], logged: Path
) -> None:
    url, page = session
    want = Warehouse(logged).read("failure_attempts", CLUSTER).filter(pl.col("reason") == REASON)
    assert want.height and (want["origin"] == "log").all()
    lines = set(want["line"])
    assert len(lines) == 1 and None not in lines  # one planted line, matched in every log
    visit(page, f"{url}/queue?cluster={CLUSTER}", "Queue and failures", [])
    # the page opens on Table 2, its shares by cause drawn in the table's cells, its chart one
    # click away (not built before: a new tab loads no chart code), the click then in the URL
    table2 = table_with(page, "Waiting time (%)")
    shares = [row[table2["header"].index("Waiting time (%)")] for row in table2["cells"]]
    assert shares and all(0 <= float(x) <= 100 for x in shares), shares
    assert charts(page) == []
    page.get_by_text("Waiting time by cause and job size, as a chart").click()
    wait_for_charts(page, ["Waiting time by cause and job size"])
    page.wait_for_url(lambda u: "chart=true" in u, timeout=30_000)
    # Table 7 is one click away, its section then in the URL
    assert page.get_by_role("heading", name="Why jobs failed (Philly Table 7)").count() == 0
    page.get_by_role("radio", name="Why jobs failed", exact=True).click()
    failures = page.get_by_role("heading", name="Why jobs failed (Philly Table 7)")
    failures.first.wait_for(timeout=30_000)
    page.wait_for_url(lambda u: "section=Why+jobs+failed" in u, timeout=30_000)
    assert page.get_by_role("heading", name="Why jobs waited (Philly Table 2)").count() == 0
    visit(page, page.url, "Queue and failures", [])  # the link opens the same section
    failures.first.wait_for(timeout=30_000)
    picker = page.locator('[data-testid="stSelectbox"]').filter(has_text="Failed attempts of")
    picker.scroll_into_view_if_needed(timeout=30_000)
    # to the top of the view: the list opens below it, and a list past the viewport's bottom
    # edge cannot be scrolled to (its options then refuse a click as outside the viewport)
    picker.evaluate("e => e.scrollIntoView({block: 'start'})")
    picker.locator("input").click()
    page.keyboard.type(REASON)  # the list filters to it
    page.get_by_role("option", name=REASON, exact=True).click()
    deadline = 60
    while True:  # the table redraws with the chosen reason's attempts
        left = table_with(page, "Reason from")
        col = {name: i for i, name in enumerate(left["header"])}
        reasons = {row[col["Failure reason"]] for row in left["cells"]}
        if reasons == {REASON} or deadline == 0:
            break
        page.wait_for_timeout(500)
        deadline -= 1
    assert reasons == {REASON}
    assert left["rows"] == want.height
    assert {row[col["Reason from"]] for row in left["cells"]} == {"log"}
    # the grid draws the columns in view: scrolled to its right end, the log's columns
    page.evaluate(SCROLL_RIGHT_JS, "Reason from")
    right = table_with(page, "Matched log line")
    col = {name: i for i, name in enumerate(right["header"])}
    assert len(right["cells"]) == want.height
    for row in right["cells"]:
        assert row[col["Matched log line"]] in lines
        assert row[col["Log file"]].startswith("slurm-")
