"""The dashboard's Policies page in a real browser (Debian's chromium through Playwright) over the
demo warehouse (`gpuwaste demo --no-serve`): the sweep's chart (reclaimed vs work lost by wrongful
hits) and its table show the figures `gpuwaste policy replay` prints, the rule comes from the URL,
a wrong threshold is named on the page, and a job the rule cancels opens on the Job page."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness.browser import (
    dashboard_session,
    demo_warehouse,
    exception_boxes,
    screenshot,
    screenshot_dir,
    tables,
    visit,
)

from tests.test_policy_replay import replay_json as _cli

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHART = "What the cancel rule reclaims and breaks"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return demo_warehouse(tmp_path_factory)


@pytest.fixture(scope="module")
def session(demo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any]]:
    with dashboard_session(demo, tmp_path_factory) as (url, page):
        yield url, page


def _open(page: Any, url: str) -> list[dict[str, Any]]:
    return visit(page, url, "Policies", [CHART], timeout_s=60)


def test_the_sweep_matches_the_command_line(
    session: tuple[str, Any], demo: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    url, page = session
    found = _open(page, f"{url}/policies?cluster=demo&idle_hours=0.5,1,2&grace=30")
    screenshot(page, screenshot_dir(tmp_path_factory), "policies")
    (chart,) = [c for c in found if c["title"].startswith(CHART)]
    assert chart["marks"] >= 2 * 3  # a point per threshold for reclaimed and for work lost
    expected = _cli(demo, "--cluster", "demo", "--idle-hours", "0.5,1,2", "--grace-minutes", "30")
    sweep = tables(page)[0]
    assert sweep["rows"] == len(expected)
    header = sweep["header"]
    hours, vc = header.index("Idle for (hours)"), header.index("VC")
    reclaimed, wrongful = header.index("Reclaimed GPU hours"), header.index("Wrongful hits")
    shown = {(float(r[hours]), r[vc]): r for r in sweep["cells"]}
    for e in expected:
        r = shown.get((e["idle_hours"], e["vc"]))
        if r is None:  # outside the rows in view
            continue
        # GPU hours show one decimal (gpuwaste/columns.py)
        assert float(r[reclaimed].replace(",", "")) == pytest.approx(e["reclaimed_gpu_h"], abs=0.05)
        assert int(r[wrongful]) == e["wrongful_hits"]
    assert len(shown) >= 3


def test_a_wrong_threshold_is_named(session: tuple[str, Any]) -> None:
    url, page = session
    page.goto(f"{url}/policies?cluster=demo&idle_hours=soon")
    page.get_by_text("--idle-hours 'soon' is not accepted").wait_for(timeout=30_000)
    assert exception_boxes(page) == []


def test_a_cancelled_job_opens_on_the_job_page(session: tuple[str, Any], demo: Path) -> None:
    url, page = session
    _open(page, f"{url}/policies?cluster=demo&idle_hours=0.5&only=debugging")
    hits = _cli(demo, "--cluster", "demo", "--idle-hours", "0.5", "--only", "debugging", "--jobs")
    assert hits
    listed = tables(page)[1]
    assert listed["rows"] == len(hits)
    first = listed["cells"][0][listed["header"].index("Job id")]
    assert first in {h["job_id"] for h in hits}
    grid = page.locator('[data-testid="stDataFrame"]').nth(1)
    grid.scroll_into_view_if_needed()
    box = grid.bounding_box()
    assert box is not None
    # the row-selection checkbox of the first data row (the header row is ~35 px high)
    page.mouse.click(box["x"] + 16, box["y"] + 35 + 17)
    page.get_by_role("heading", name="Job", exact=True).first.wait_for(timeout=30_000)
    page.wait_for_url(f"**job={first}*", timeout=30_000)
