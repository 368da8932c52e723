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

from tests.support.components import free_port, in_ci, require

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
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        msg = "the playwright package is not installed (pip install -e '.[dev]')"
        if in_ci():
            pytest.fail(msg)
        pytest.skip(msg)
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


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=1) as r:
            return bool(r.status == 200)
    except OSError:
        return False


@contextmanager
def dashboard_server(data_dir: Path, log: Path, timeout_s: float = 60.0) -> Iterator[str]:
    """`gpuwaste dashboard --data-dir D --port P` on 127.0.0.1; yields its base URL."""
    port = free_port()
    gpuwaste = Path(sys.executable).with_name("gpuwaste")
    cmd = [str(gpuwaste), "dashboard", "--data-dir", str(data_dir), "--port", str(port)]
    env = {k: v for k, v in os.environ.items() if k not in ("PORT", "GPUWASTE_DATA_DIR")}
    url = f"http://127.0.0.1:{port}"
    with open(log, "wb") as out:
        # Its own process group, so that the streamlit child goes down with it.
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        try:
            deadline = time.monotonic() + timeout_s
            while not _healthy(url):
                if proc.poll() is not None:
                    raise RuntimeError(f"gpuwaste dashboard exited ({proc.returncode}): "
                                       f"{log.read_text(errors='replace')[-2000:]}")  # fmt: skip
                if time.monotonic() > deadline:
                    raise RuntimeError(f"gpuwaste dashboard not healthy after {timeout_s} s")
                time.sleep(0.2)
            yield url
        finally:
            _stop_group(proc)


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
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
