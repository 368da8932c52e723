"""A real browser for dashboard tests: Debian's chromium driven by Playwright (never
`playwright install`), and `gpuwaste dashboard` started on a free loopback port."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from harness.components import free_port, require, require_module

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

# Every chart on the page (Vega-Lite, drawn as SVG): its title (the chart's accessible name,
# which widgets.plot sets to the title), how many marks are drawn (a line, a bar, a shaded span,
# a heatmap cell each count one) and its legend's labels.
CHARTS_JS = """
() => Array.from(document.querySelectorAll('[data-testid="stVegaLiteChart"]')).map(el => ({
  title: el.getAttribute('aria-label') || '',
  marks: Array.from(el.querySelectorAll('g.role-mark')).reduce((n, g) => n + g.children.length, 0),
  legend: Array.from(el.querySelectorAll('g.role-legend-label text')).map(t => t.textContent),
}))
"""


def require_browser() -> str:
    """Chromium's path; the test fails under CI and skips elsewhere when it is missing."""
    path = require("chromium")
    require_module(
        "playwright.sync_api", "the playwright package is not installed (pip install -e '.[dev]')"
    )
    return CHROMIUM if Path(CHROMIUM).exists() else path


@contextmanager
def browser_page(width: int = 1500, height: int = 1100) -> Iterator[Any]:
    """A fresh chromium page (Playwright sync API)."""
    from playwright.sync_api import sync_playwright

    exe = require_browser()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS, headless=True)
        try:
            context = browser.new_context(viewport={"width": width, "height": height})
            yield context.new_page()
        finally:
            browser.close()


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=1) as r:
            return bool(r.status == 200)
    except OSError:
        return False


@contextmanager
def dashboard_server(
    data_dir: Path,
    log: Path,
    timeout_s: float = 60.0,
    port: int | None = None,
    timing_log: Path | None = None,
    pid: list[int] | None = None,
    app: Path | None = None,
) -> Iterator[str]:
    """`gpuwaste dashboard --data-dir D --port P` on 127.0.0.1 (P free, or `port`: a server
    restarted on the same address, whose files a browser has cached); yields its base URL.
    `timing_log`: the same server, started directly with its page runs and queries timed into
    that file (harness/timed_server.py). `pid`: gets the server's process (group) id. `app`
    (with `timing_log`): the same server running another Streamlit script instead of the
    dashboard's (a trivial page: what Streamlit itself costs)."""
    from gpuwaste.config import DATA_DIR_ENV
    from gpuwaste.dashboard.cli import streamlit_command

    port = port or free_port()
    gpuwaste = Path(sys.executable).with_name("gpuwaste")
    cmd = [str(gpuwaste), "dashboard", "--data-dir", str(data_dir), "--port", str(port)]
    env = {k: v for k, v in os.environ.items() if k not in ("PORT", DATA_DIR_ENV)}
    if timing_log is not None:
        timed = Path(__file__).with_name("timed_server.py")
        run, script, *options = streamlit_command("127.0.0.1", port)[3:]
        cmd = [sys.executable, str(timed), str(timing_log), run, str(app or script), *options]
        env[DATA_DIR_ENV] = str(data_dir.resolve())
    url = f"http://127.0.0.1:{port}"
    with open(log, "wb") as out:
        # Its own process group, so that the streamlit child goes down with it.
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        if pid is not None:
            pid.append(proc.pid)
        try:
            deadline = time.monotonic() + timeout_s
            while not healthy(url):
                if proc.poll() is not None:
                    raise RuntimeError(f"gpuwaste dashboard exited ({proc.returncode}): "
                                       f"{log.read_text(errors='replace')[-2000:]}")  # fmt: skip
                if time.monotonic() > deadline:
                    raise RuntimeError(f"gpuwaste dashboard not healthy after {timeout_s} s")
                time.sleep(0.2)
            yield url
        finally:
            stop_group(proc)


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM the server's process group (gpuwaste and its streamlit child), then SIGKILL."""
    for sig, wait_s in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            proc.poll()
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)


def group_cpu_s(pgid: int) -> float:
    """CPU seconds (user + system) of the live processes of a process group so far."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:  # fields after the name: state, ppid, pgrp, ...
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / tick


def charts(page: Any) -> list[dict[str, Any]]:
    return list(page.evaluate(CHARTS_JS))


def wait_for_charts(
    page: Any, titles: list[str], timeout_s: float = 30.0, poll_ms: int = 250
) -> list[dict[str, Any]]:
    """Poll until a chart whose title starts with each of `titles` shows, with marks, and the
    app has stopped running; return all charts. Raises AssertionError naming what is missing.
    (The benchmark polls every 25 ms, so that its timings are not rounded up by the poll.)"""
    deadline = time.monotonic() + timeout_s
    missing = titles
    while True:
        running = page.locator('[data-testid="stStatusWidget"]').count() > 0
        found = charts(page)
        missing = [t for t in titles if not any(c["title"].startswith(t) and c["marks"] > 0
                                                 for c in found)]  # fmt: skip
        if not missing and not running:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"charts missing after {timeout_s} s: {missing}; found {found}")
        page.wait_for_timeout(poll_ms)


def exception_boxes(page: Any) -> list[str]:
    loc = page.locator('[data-testid="stException"]')
    return [loc.nth(i).inner_text() for i in range(loc.count())]


# The rows a table (st.dataframe) shows, as text: the grid keeps an accessible <table> of its
# header and the rows in view.
TABLES_JS = """
() => Array.from(document.querySelectorAll('[data-testid="stDataFrame"] table[role="grid"]')).map(t => ({
  rows: Number(t.getAttribute('aria-rowcount')) - 1,
  header: Array.from(t.querySelectorAll('thead th')).map(th => th.innerText.trim()),
  cells: Array.from(t.querySelectorAll('tbody tr')).map(tr =>
    Array.from(tr.querySelectorAll('td')).map(td => td.innerText.trim())),
}))
"""

# Per chart: its panels (one per facet cell), axes, and the boxes of its titles, subtitles,
# headers and axis titles (which must not overlap).
LAYOUT_JS = """
(title) => {
  const el = Array.from(document.querySelectorAll('[data-testid="stVegaLiteChart"]'))
    .find(e => (e.getAttribute('aria-label') || '').startsWith(title));
  if (!el) return null;
  const box = t => { const r = t.getBoundingClientRect();
    return {text: t.textContent, x: r.x, y: r.y, w: r.width, h: r.height}; };
  const texts = sel => Array.from(el.querySelectorAll(sel)).filter(t => t.textContent).map(box);
  return {
    panels: el.querySelectorAll('g.role-scope.cell > g').length,
    axes: Array.from(el.querySelectorAll('g.role-axis'))
      .filter(a => a.querySelector('g.role-axis-label text')).length,
    labels: texts('g[class*="title"] text, g[class*="header"] text'),
    legend: texts('g.role-legend-label text'),
    box: box(el),
  };
}
"""


def tables(page: Any, timeout_s: float = 30.0) -> list[dict[str, Any]]:
    """Each table on the page: its row count, header and the cells of the rows in view (once
    every table has drawn its rows)."""
    deadline = time.monotonic() + timeout_s
    while True:
        grids = page.locator('[data-testid="stDataFrame"]').count()
        found = list(page.evaluate(TABLES_JS))
        if len(found) == grids and all(t["cells"] for t in found):
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"{grids} tables, {len(found)} drawn after {timeout_s} s")
        page.wait_for_timeout(250)


def table_with(page: Any, column: str, timeout_s: float = 30.0) -> dict[str, Any]:
    """The first table on the page with `column` in its header, once drawn (`tables`). A page
    draws its tables as its script reaches them, so the one wanted may come after the others."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = [t for t in tables(page, timeout_s) if column in t["header"]]
        if found:
            return found[0]
        if time.monotonic() > deadline:
            raise AssertionError(f"no table with a column {column!r} after {timeout_s} s")
        page.wait_for_timeout(250)


# What a page says in words: its captions, the column titles of its tables (those drawn, in
# expanders too), and per chart how far its title's top lies above the chart's frame (> 0: cut).
WORDS_JS = """
() => ({
  captions: Array.from(document.querySelectorAll('[data-testid="stCaptionContainer"]'))
    .map(c => c.textContent),
  headers: Array.from(document.querySelectorAll(
      '[data-testid="stDataFrame"] table[role="grid"] thead th'))
    .map(th => th.textContent.trim()).filter(t => t),
  titles: Array.from(document.querySelectorAll('[data-testid="stVegaLiteChart"]')).map(el => {
    const frame = el.getBoundingClientRect();
    const text = el.querySelector('g.role-title-text text');
    const box = text ? text.getBoundingClientRect() : frame;
    return {title: el.getAttribute('aria-label') || '', above: frame.top - box.top};
  }),
})
"""


def words(page: Any) -> dict[str, Any]:
    """The page's captions, table column titles and chart title placements (WORDS_JS)."""
    return dict(page.evaluate(WORDS_JS))


def chart_layout(page: Any, title: str) -> dict[str, Any] | None:
    return page.evaluate(LAYOUT_JS, title)  # type: ignore[no-any-return]


def metrics(page: Any) -> dict[str, str]:
    """Each st.metric's label and value."""
    found = page.evaluate(
        """() => Array.from(document.querySelectorAll('[data-testid="stMetric"]')).map(m => [
             m.querySelector('[data-testid="stMetricLabel"]').innerText.trim(),
             m.querySelector('[data-testid="stMetricValue"]').innerText.trim()])"""
    )
    return {label: value for label, value in found}


def overlapping(boxes: list[dict[str, Any]], slack: float = 2.0) -> list[tuple[str, str]]:
    """Pairs of text boxes that overlap by more than `slack` px both ways (a text's box holds
    its line's ascent and descent, so lines set close touch without their letters meeting)."""
    out = []
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            across = min(a["x"] + a["w"], b["x"] + b["w"]) - max(a["x"], b["x"])
            down = min(a["y"] + a["h"], b["y"] + b["h"]) - max(a["y"], b["y"])
            if across > slack and down > slack:
                out.append((a["text"], b["text"]))
    return out


# ------------------------------------------------------------------ a dashboard test's session
def demo_warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo warehouse (`gpuwaste demo --no-serve`) for a browser test: built only when the
    browser is there (which fails under CI, skips elsewhere, before the build)."""
    from harness.result_warehouse import build_demo_warehouse

    require_browser()
    return build_demo_warehouse(tmp_path_factory.mktemp("demo") / "data")


@contextmanager
def dashboard_session(
    data_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Any]]:
    """`gpuwaste dashboard` over `data_dir` and a chromium page: yields (its base URL, the
    page). The server's log goes to a fresh folder of the test session."""
    log = tmp_path_factory.mktemp("server") / "dashboard.log"
    with dashboard_server(data_dir, log) as url, browser_page() as page:
        yield url, page


def visit(
    page: Any, url: str, heading: str, charts: list[str], timeout_s: float = 30.0
) -> list[dict[str, Any]]:
    """Open `url` and wait for the page's `heading` and for a drawn chart whose title starts
    with each of `charts`; no exception box and no "Page not found" may show. Returns every
    chart (`wait_for_charts`)."""
    page.goto(url)
    page.get_by_role("heading", name=heading, exact=True).first.wait_for(timeout=30_000)
    found = wait_for_charts(page, charts, timeout_s=timeout_s)
    assert exception_boxes(page) == []
    assert page.get_by_text("Page not found").count() == 0
    return found


def screenshot_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where screenshots go: $GPUWASTE_SCREENSHOT_DIR (how docs/screenshots are made), else a
    fresh folder of the test session."""
    out = os.environ.get("GPUWASTE_SCREENSHOT_DIR")
    d = Path(out) if out else tmp_path_factory.mktemp("screenshots")
    d.mkdir(parents=True, exist_ok=True)
    return d


def screenshot(page: Any, folder: Path, name: str) -> Path:
    """The whole page as `folder/name.png`; a blank or failed capture fails the test."""
    path = folder / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 10_000, path
    return path
