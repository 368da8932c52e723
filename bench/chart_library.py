"""Benchmark: what a chart library costs a Streamlit page opened in a new browser tab.

    .venv/bin/python bench/chart_library.py [--repeat 5]

The same minimal app (a title and three small bar charts) is served four times by Streamlit, with
no chart (the baseline: three paragraphs), plotly (`st.plotly_chart`), Vega-Lite
(`st.vega_lite_chart`, what gpuwaste uses) and ECharts (`st.echarts_chart`). Each is opened in a
new tab of a Debian chromium that already has the app's files cached, and timed from navigation
until the three charts are drawn. Prints the median per library and its excess over the baseline,
measured in the same run. This is why the dashboard's charts are Vega-Lite (docs/dashboard.md).
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

from harness.browser import browser_page, healthy, stop_group  # noqa: E402
from harness.components import free_port  # noqa: E402

HEAD = "import streamlit as st\nst.title('Mini')\nys = [1, 3, 2, 5, 4, 6]\n"
APPS = {
    "no chart (baseline)": "for i in range(3):\n    st.markdown(f'para {i}')\n",
    "plotly": (
        "import plotly.graph_objects as go\n"
        "for i in range(3):\n"
        "    st.plotly_chart(go.Figure(go.Bar(x=list('abcdef'), y=ys)), key=f'c{i}')\n"
    ),
    "Vega-Lite": (
        "for i in range(3):\n"
        "    st.vega_lite_chart({'data': {'values': [{'x': c, 'y': v} for c, v in zip('abcdef', ys)]},\n"
        "        'mark': 'bar', 'encoding': {'x': {'field': 'x', 'type': 'nominal'},\n"
        "        'y': {'field': 'y', 'type': 'quantitative'}}}, key=f'c{i}')\n"
    ),
    "ECharts": (
        "for i in range(3):\n"
        "    st.echarts_chart({'xAxis': {'type': 'category', 'data': list('abcdef')},\n"
        "        'yAxis': {'type': 'value'}, 'series': [{'type': 'bar', 'data': ys}]}, key=f'c{i}')\n"
    ),
}
# Charts drawn: a chart container with its drawing (SVG or canvas) inside; or, for the baseline,
# the three paragraphs.
DRAWN_JS = """() => {
  const charts = document.querySelectorAll(
    '[data-testid="stPlotlyChart"], [data-testid="stVegaLiteChart"], [data-testid*="EChart"]');
  let drawn = 0;
  charts.forEach(c => { if (c.querySelector('canvas, svg')) drawn++; });
  const paras = Array.from(document.querySelectorAll('p')).filter(p => p.textContent.startsWith('para'));
  return Math.max(drawn, paras.length);
}"""


def start_app(app: Path, *options: str, env: dict[str, str] | None = None) -> tuple[Any, str]:
    """`streamlit run APP` on a free loopback port, once it answers: (its process, its URL)."""
    port = free_port()
    cmd = [sys.executable, "-m", "streamlit", "run", str(app), "--server.port", str(port),
           "--server.address", "127.0.0.1", "--server.headless", "true",
           "--browser.gatherUsageStats", "false", *options]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, env=env)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while not healthy(url):
        if time.monotonic() > deadline:
            stop_group(proc)
            raise RuntimeError(f"streamlit did not start for {app}")
        time.sleep(0.2)
    return proc, url


def new_tab_seconds(app: Path, repeat: int) -> list[float]:
    proc, url = start_app(app)
    times = []
    try:
        with browser_page() as first:
            first.goto(url)  # the browser caches the app's files, the server runs the script once
            first.get_by_role("heading", name="Mini").wait_for(timeout=60_000)
            first.wait_for_function(f"({DRAWN_JS})() >= 3", timeout=60_000)
            for _ in range(repeat):
                page = first.context.new_page()
                t0 = time.perf_counter()
                page.goto(url)
                page.wait_for_function(f"({DRAWN_JS})() >= 3", polling=10, timeout=60_000)
                times.append(time.perf_counter() - t0)
                page.close()
    finally:
        stop_group(proc)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    import os

    print(f"load average at the start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, body in APPS.items():
            if name == "plotly" and importlib.util.find_spec("plotly") is None:
                print("plotly is not installed (not a gpuwaste dependency): pip install plotly")
                continue
            app = Path(tmp) / f"app_{len(results)}.py"
            app.write_text(HEAD + body)
            results[name] = statistics.median(new_tab_seconds(app, args.repeat))
    print(f"load average at the end: {os.getloadavg()[0]:.1f}\n")
    base = results["no chart (baseline)"]
    print(f"New tab, three charts, median of {args.repeat}; seconds\n")
    print("| library | new tab | over the baseline |")
    print("| --- | --- | --- |")
    for name, t in results.items():
        print(f"| {name} | {t:.2f} | {'-' if t is base else f'+{t - base:.2f}'} |")


if __name__ == "__main__":
    main()
