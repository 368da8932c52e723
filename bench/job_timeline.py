"""Benchmark: the Job page's per-GPU timeline of a long job, Vega-Lite against plotly (WebGL).

    .venv/bin/python bench/job_timeline.py [--repeat 5] [--gpus 8] [--days 7]

A job of 8 GPUs x 7 days sampled every 15 s (40,320 samples per GPU and series) with an idle
slot every few hours. Each version of the timeline is served by Streamlit from the same parquet
files and measured in a real Debian chromium (Playwright):

- *new tab*: a browser that already has the app's files opens it in a new tab; from navigation
  until the chart is drawn and the next animation frame has run;
- *zoom*: four wheel notches over the first GPU's row (real input events), until the chart has
  settled: the time of the last animation frame that came late (main thread busy, > 40 ms after
  the previous one), with 300 ms of regular frames after it;
- *pan*: a 300 px drag along the time axis (in 10 moves), measured the same way.

Versions: no chart (the baseline: two paragraphs); Vega-Lite as the Job page draws it
(`charts.timeline`, SVG, the samples averaged into 720 time buckets per GPU as
`reads.job_timeline` does), with the zoom and pan it lacks today (an interval selection bound
to the x scale in each row); Vega-Lite with every sample (SVG, and canvas); plotly with
`Scattergl` traces, every sample and the 720 buckets, idle slots as shapes. Medians of
`--repeat`, printed in seconds and as ratios against the baseline of the same run. The browser
has no GPU here (`--disable-gpu`: WebGL runs in SwiftShader, on the CPU), as a dashboard host's
browser would not either; an operator's desktop browser with a GPU draws WebGL faster.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

REPO = Path(__file__).resolve().parent.parent

from harness.browser import require_browser, stop_group  # noqa: E402

from bench.chart_library import start_app  # noqa: E402

STEP_S = 15
BUCKETS = 720  # gpuwaste.analyses.reads.TIMELINE_POINTS
START = datetime(2026, 11, 1, tzinfo=UTC)
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--enable-unsafe-swiftshader",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip


def job_frames(gpus: int, days: int, seed: int = 0) -> dict[str, pl.DataFrame]:
    """samples (host, gpu, ts, util, mem_used_mib), gpus (job_gpu_usage's columns the chart
    reads) and idle slots of one job: training at 70-95 % with 40 GiB held, and an idle slot of
    5-40 min (utilization and memory 0) every 2-6 hours."""
    rng = np.random.default_rng(seed)
    n = days * 86400 // STEP_S
    ts = pl.datetime_range(START, START + pl.duration(seconds=(n - 1) * STEP_S),
                           f"{STEP_S}s", time_zone="UTC", eager=True)  # fmt: skip
    frames, slots = [], []
    for g in range(gpus):
        util = np.clip(rng.normal(85, 8, n), 0, 100)
        mem = np.full(n, 40_000.0) + rng.normal(0, 50, n)
        i = int(rng.integers(0, 720))
        while i < n:
            length = int(rng.integers(20, 160))  # 5-40 min
            util[i : i + length] = 0.0
            mem[i : i + length] = 0.0
            end = min(i + length, n) - 1
            slots.append(("node01", g, ts[i], ts[end]))
            i += length + int(rng.integers(480, 1440))
        frames.append(pl.DataFrame({"host": "node01", "gpu": g, "ts": ts, "util": util,
                                    "mem_used_mib": mem}))  # fmt: skip
    samples = pl.concat(frames).with_columns(pl.col("gpu").cast(pl.Int16))
    slot_frame = pl.DataFrame(slots, schema=["host", "gpu", "start_ts", "end_ts"], orient="row")
    usage = pl.DataFrame({"host": "node01", "gpu": list(range(gpus)), "never_used": False,
                          "start_ts": ts[0], "end_ts": ts[-1], "mem_total_mib": 81_920.0})  # fmt: skip
    return {
        "samples": samples,
        "gpus": usage.with_columns(pl.col("gpu").cast(pl.Int16)),
        "slots": slot_frame.with_columns(pl.col("gpu").cast(pl.Int16)),
    }


def bucketed(samples: pl.DataFrame, points: int = BUCKETS) -> pl.DataFrame:
    """What reads.job_timeline sends: util averaged, memory maxed in span / points buckets."""
    lo_ms, hi_ms = samples.select(
        pl.col("ts").dt.epoch("ms").min().alias("lo"), pl.col("ts").dt.epoch("ms").max().alias("hi")
    ).row(0)
    span = max((hi_ms - lo_ms) / 1000, 1.0)
    bucket_ms = max(1.0, span / points) * 1000
    ms = pl.col("ts").dt.epoch("ms")
    return (
        samples.with_columns(((ms / bucket_ms).floor() * bucket_ms).cast(pl.Int64).alias("b"))
        .group_by("host", "gpu", "b")
        .agg(pl.col("util").mean(), pl.col("mem_used_mib").max())
        .with_columns(pl.from_epoch("b", time_unit="ms").dt.replace_time_zone("UTC").alias("ts"))
        .drop("b")
        .sort("host", "gpu", "ts")
    )


HEAD = """import polars as pl
import streamlit as st
D = {DIR!r}
samples = pl.read_parquet(D + '/{SAMPLES}.parquet')
gpus = pl.read_parquet(D + '/gpus.parquet')
slots = pl.read_parquet(D + '/slots.parquet')
st.title('Job')
"""
VEGA = """from gpuwaste.dashboard import charts
phases = slots.head(0).with_columns(stable=pl.lit(True))
spec = charts.timeline(samples, gpus, slots, phases, 'GPU utilization and memory per GPU')
spec['usermeta']['embedOptions']['renderer'] = {RENDERER!r}
for i, row in enumerate(spec['vconcat']):  # zoom (wheel) and pan (drag) on the shared time axis
    row['layer'][2]['params'] = [{{'name': f'zoom{{i}}', 'bind': 'scales',
                                  'select': {{'type': 'interval', 'encodings': ['x']}}}}]
st.vega_lite_chart(spec, key='timeline', width='stretch')
"""
PLOTLY = """import plotly.graph_objects as go
from plotly.subplots import make_subplots
keys = gpus.sort('host', 'gpu').select('host', 'gpu').rows()
fig = make_subplots(rows=len(keys), cols=1, shared_xaxes=True, vertical_spacing=0.03,
                    specs=[[{'secondary_y': True}]] * len(keys),
                    subplot_titles=[f'{h} GPU {g}' for h, g in keys])
for i, (h, g) in enumerate(keys):
    d = samples.filter((pl.col('host') == h) & (pl.col('gpu') == g))
    x = d['ts'].dt.epoch('ms').to_numpy()
    fig.add_trace(go.Scattergl(x=x, y=d['util'].to_numpy(), mode='lines', name='GPU util %',
                               line={'color': '#4C78A8', 'width': 1.5}, legendgroup='u',
                               showlegend=i == 0), row=i + 1, col=1)
    fig.add_trace(go.Scattergl(x=x, y=d['mem_used_mib'].to_numpy(), mode='lines',
                               name='memory MiB', line={'color': '#F58518', 'width': 1.5},
                               legendgroup='m', showlegend=i == 0),
                  row=i + 1, col=1, secondary_y=True)
    for s in slots.filter((pl.col('host') == h) & (pl.col('gpu') == g)).iter_rows(named=True):
        fig.add_vrect(x0=s['start_ts'], x1=s['end_ts'], fillcolor='#E45756', opacity=0.25,
                      line_width=0, row=i + 1, col=1)
fig.update_xaxes(type='date')
fig.update_layout(height=130 * len(keys), dragmode='pan', margin={'t': 40, 'b': 30})
st.plotly_chart(fig, key='timeline', config={'scrollZoom': True})
"""
BASELINE = "st.markdown('para 0')\nst.markdown('para 1')\n"

# Drawn: the chart's drawing (SVG marks or a canvas) is in the page; the baseline: its paragraphs.
DRAWN_JS = """() => {
  const v = document.querySelector('[data-testid="stVegaLiteChart"]');
  if (v && v.querySelector('g.role-mark path, canvas')) return true;
  const p = document.querySelector('[data-testid="stPlotlyChart"]');
  if (p && p.querySelector('canvas.gl-canvas') && p.querySelector('.xaxislayer-above text')) return true;
  return Array.from(document.querySelectorAll('p')).filter(
    e => e.textContent.startsWith('para')).length >= 2;
}"""
# One more animation frame after `DRAWN_JS` holds: the frame that shows the chart.
FRAME_JS = "() => new Promise(r => requestAnimationFrame(() => r(performance.now())))"
# Records every animation frame's time in window.__frames.
RECORD_JS = """() => { window.__frames = [];
  const tick = t => { window.__frames.push(performance.now()); requestAnimationFrame(tick); };
  requestAnimationFrame(tick); return performance.now(); }"""
LATE_MS, QUIET_MS = 40, 300
# Settled: QUIET_MS of regular frames after t0; returns the end of the last late frame (or the
# first frame after t0 when none was late), else null.
SETTLED_JS = f"""t0 => {{
  const f = window.__frames.filter(t => t >= t0);
  if (f.length < 2 || performance.now() - t0 < {QUIET_MS}) return null;
  let end = f[0];
  for (let i = 1; i < f.length; i++) if (f[i] - f[i - 1] > {LATE_MS}) end = f[i];
  return performance.now() - end >= {QUIET_MS} ? end - t0 : null;
}}"""


def _settle(page: Any, t0: float) -> float:
    handle = page.wait_for_function(SETTLED_JS, arg=t0, polling=50, timeout=300_000)
    return float(handle.json_value()) / 1000


def _chart_box(page: Any) -> Any:
    """The chart's bounding box (x, y, width, height), or None without a chart."""
    chart = page.locator('[data-testid="stVegaLiteChart"], [data-testid="stPlotlyChart"]')
    return chart.first.bounding_box() if chart.count() else None


def zoom(page: Any) -> float:
    """Four wheel notches (zoom in) over the middle of the first row."""
    box = _chart_box(page) or {"x": 200, "y": 300, "width": 600, "height": 0}
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + 90)
    t0 = float(page.evaluate("() => performance.now()"))
    for _ in range(4):
        page.mouse.wheel(0, -200)
    return _settle(page, t0)


def pan(page: Any) -> float:
    """A 300 px drag to the right along the first row."""
    box = _chart_box(page) or {"x": 200, "y": 300, "width": 600, "height": 0}
    x, y = box["x"] + box["width"] / 2, box["y"] + 90
    page.mouse.move(x, y)
    t0 = float(page.evaluate("() => performance.now()"))
    page.mouse.down()
    page.mouse.move(x + 300, y, steps=10)
    page.mouse.up()
    return _settle(page, t0)


def measure(app: Path, repeat: int) -> dict[str, Any]:
    """New tab, zoom and pan times (lists of seconds) and whether zoom and pan changed the chart."""
    from playwright.sync_api import sync_playwright

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc, url = start_app(app, "--server.maxMessageSize", "1000", env=env)
    out: dict[str, Any] = {"new tab": [], "zoom": [], "pan": [], "changed": True}
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=require_browser(), args=CHROMIUM_ARGS,
                                         headless=True)  # fmt: skip
            context = browser.new_context(viewport={"width": 1500, "height": 1300})
            first = context.new_page()
            first.goto(url)  # the browser caches the app's files, the server runs the script once
            first.wait_for_function(DRAWN_JS, timeout=300_000)
            for _ in range(repeat):
                page = context.new_page()
                t0 = time.perf_counter()
                page.goto(url)
                page.wait_for_function(DRAWN_JS, polling="raf", timeout=300_000)
                page.evaluate(FRAME_JS)
                out["new tab"].append(time.perf_counter() - t0)
                page.wait_for_timeout(500)
                t_rec = page.evaluate(RECORD_JS)
                _settle(page, t_rec)  # the page is idle before the gesture
                box = _chart_box(page)
                before = page.screenshot(clip=box) if box else b""
                out["zoom"].append(zoom(page))
                out["pan"].append(pan(page))
                after = page.screenshot(clip=box) if box else b""
                out["changed"] &= before != after
                page.close()
            browser.close()
    finally:
        stop_group(proc)
    return out


def apps(gpus: int) -> dict[str, tuple[str, str]]:
    """Version name -> (samples file, app body)."""
    versions = {
        "no chart (baseline)": ("full", BASELINE),
        f"Vega-Lite, {BUCKETS} buckets/GPU, SVG (the Job page) + zoom/pan": (
            "buckets", VEGA.format(RENDERER="svg")),
        "Vega-Lite, every sample, SVG": ("full", VEGA.format(RENDERER="svg")),
        "Vega-Lite, every sample, canvas": ("full", VEGA.format(RENDERER="canvas")),
        "plotly Scattergl, every sample": ("full", PLOTLY),
        f"plotly Scattergl, {BUCKETS} buckets/GPU": ("buckets", PLOTLY),
    }  # fmt: skip
    if importlib.util.find_spec("plotly") is None:
        print("plotly is not installed (not a gpuwaste dependency): pip install plotly")
        versions = {k: v for k, v in versions.items() if "plotly" not in k}
    return versions


def _fmt(values: list[float], base: float, ratio: Callable[[float, float], str]) -> str:
    m = statistics.median(values)
    return f"{m:.2f} ({ratio(m, base)})"


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--days", type=int, default=7)
    ap.add_argument("--only", help="run only the versions whose name contains this text")
    args = ap.parse_args()
    print(f"load average at the start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        frames = job_frames(args.gpus, args.days)
        frames["samples"].write_parquet(f"{tmp}/full.parquet")
        bucketed(frames["samples"]).write_parquet(f"{tmp}/buckets.parquet")
        frames["gpus"].write_parquet(f"{tmp}/gpus.parquet")
        frames["slots"].write_parquet(f"{tmp}/slots.parquet")
        per_gpu = frames["samples"].height // args.gpus
        print(f"{args.gpus} GPUs x {args.days} days at {STEP_S} s: {per_gpu:,} samples per GPU, "
              f"{frames['slots'].height} idle slots")  # fmt: skip
        for i, (name, (which, body)) in enumerate(apps(args.gpus).items()):
            if args.only and args.only not in name and "baseline" not in name:
                continue
            app = Path(tmp) / f"app_{i}.py"
            app.write_text(HEAD.format(DIR=tmp, SAMPLES=which) + body)
            results[name] = measure(app, args.repeat)
            print(f"  {name}: " + ", ".join(f"{k} {statistics.median(v):.2f} s"
                  for k, v in results[name].items() if isinstance(v, list)), flush=True)  # fmt: skip
    print(f"load average at the end: {os.getloadavg()[0]:.1f}\n")
    base = results["no chart (baseline)"]

    def ratio(m: float, b: float) -> str:
        return f"{m / b:.1f}x" if b > 0 else "-"

    print(f"Median of {args.repeat}; seconds (ratio to the baseline of this run)\n")
    print("| version | new tab | zoom (4 wheel notches) | pan (300 px drag) | chart moved |")
    print("| --- | --- | --- | --- | --- |")
    for name, r in results.items():
        cells = [_fmt(r[k], statistics.median(base[k]), ratio) for k in ("new tab", "zoom", "pan")]
        moved = "-" if r is base else ("yes" if r["changed"] else "NO")
        print(f"| {name} | {' | '.join(cells)} | {moved} |")


if __name__ == "__main__":
    main()
