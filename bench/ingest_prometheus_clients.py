"""Benchmark: gpuwaste's Prometheus client against prometheus-api-client, on a real Prometheus.

    .venv/bin/python bench/ingest_prometheus_clients.py [--gpus 32] [--days 1] [--no-write]

Writes the project generator's cluster, backfills it into a temporary Prometheus on loopback
(tests/support/prometheus.py), and in one process, interleaved, best of `REPEATS`:

1. the raw range selections one gpuwaste ingest of the window makes (`metric{}[<window>ms]` at
   each window's end), fetched and decoded by gpuwaste's `PrometheusClient.query` (requests,
   body -> polars) and by prometheus-api-client's `custom_query` (requests, body -> `json` ->
   Python lists: it would still have to become a frame);
2. one metric over the whole window in one-hour chunks: prometheus-api-client's
   `get_metric_range_data` against gpuwaste's half-open windows of raw selections: time, and the
   samples each returns (prometheus-api-client's chunks overlap at their edges);

Ratios are prometheus-api-client / gpuwaste: above 1, gpuwaste is faster.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import polars as pl  # noqa: E402
from prometheus_api_client import PrometheusConnect  # noqa: E402

from gpuwaste.config import PrometheusSource  # noqa: E402
from gpuwaste.generate import GeneratorSpec, write_all  # noqa: E402
from gpuwaste.ingest.prometheus.client import PrometheusClient  # noqa: E402
from gpuwaste.ingest.prometheus.rows import GPU_METRICS, HOST_METRICS  # noqa: E402
from gpuwaste.ingest.prometheus.source import plan_windows, window_length  # noqa: E402
from tests.support.prometheus import PrometheusServer  # noqa: E402

MARK_START = "<!-- bench/ingest_prometheus_clients.py: start -->"
MARK_END = "<!-- bench/ingest_prometheus_clients.py: end -->"
REPEATS = 3
RANGE_METRIC = "DCGM_FI_DEV_GPU_UTIL"
RANGE_CHUNK = timedelta(hours=1)  # the same chunks for both clients: their edges are compared


def _iso(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def best_of_each(ours: Callable[[], int], theirs: Callable[[], int]) -> list[tuple[float, int]]:
    """Fastest of REPEATS runs of each function (which return the samples they got), the two
    alternating; (seconds, samples) for each."""
    best = [(float("inf"), 0), (float("inf"), 0)]
    for _ in range(REPEATS):
        for i, fn in enumerate((ours, theirs)):
            t = time.perf_counter()
            n = fn()
            best[i] = min(best[i], (time.perf_counter() - t, n))
    return best


def selections(src: PrometheusSource, start: datetime, end: datetime) -> list[tuple[str, datetime]]:
    """(query, time) of the raw range selections an ingest of [start, end) sends, as
    `prometheus.source.Fetcher.raw` builds them (no label filter, no counter lead)."""
    out = []
    for ws, we in plan_windows(start, end, window_length(src)):
        span_ms = round((we - ws).total_seconds() * 1000)
        for metric in (*GPU_METRICS, *HOST_METRICS):
            out.append((f"{metric}{{}}[{span_ms}ms]", we - timedelta(milliseconds=1)))
    return out


def run(gpus: int, days: float, workdir: Path) -> dict[str, Any]:
    f: dict[str, Any] = {"gpus": gpus, "days": days, "load_before": os.getloadavg()[0]}
    write_all(GeneratorSpec(seed=1, gpus=gpus, days=days), workdir / "gen")
    truth = json.loads((workdir / "gen" / "truth.json").read_text())
    start, end = _iso(truth["window"]["start"]), _iso(truth["window"]["end"])
    server = PrometheusServer(workdir / "gen" / "metrics.om", workdir / "prom")
    server.backfill()
    server.start()
    try:
        src = PrometheusSource(url=server.url)
        ours = PrometheusClient(src)
        theirs = PrometheusConnect(url=server.url, disable_ssl=True)
        queries = selections(src, start, end)
        f["queries"] = len(queries)

        def ours_query() -> int:
            return sum(ours.query(q, at).n_samples for q, at in queries)

        def theirs_query() -> int:
            total = 0
            for q, at in queries:
                result = theirs.custom_query(q, params={"time": f"{at.timestamp():.3f}"})
                total += sum(len(r["values"]) for r in result)
            return total

        (f["ours_query_s"], f["ours_samples"]), (f["theirs_query_s"], f["theirs_samples"]) = (
            best_of_each(ours_query, theirs_query)
        )

        windows = plan_windows(start, end, RANGE_CHUNK)

        def ours_range() -> int:
            total = 0
            for ws, we in windows:
                span_ms = round((we - ws).total_seconds() * 1000)
                q = f"{RANGE_METRIC}{{}}[{span_ms}ms]"
                got = ours.query(q, we - timedelta(milliseconds=1)).samples
                total += got.filter((pl.col("ts") >= ws) & (pl.col("ts") < we)).height
            return total

        def theirs_range() -> int:
            data = theirs.get_metric_range_data(
                RANGE_METRIC, start_time=start, end_time=end, chunk_size=RANGE_CHUNK
            )
            return sum(len(r["values"]) for r in data)

        f["windows"] = len(windows)
        ours_best, theirs_best = best_of_each(ours_range, theirs_range)
        f["ours_range_s"], f["ours_range_samples"] = ours_best
        f["theirs_range_s"], f["theirs_range_samples"] = theirs_best
        ours.close()
    finally:
        server.stop()
    f["load_after"] = os.getloadavg()[0]
    return f


def report(f: dict[str, Any]) -> str:
    q_ratio = f["theirs_query_s"] / f["ours_query_s"]
    r_ratio = f["theirs_range_s"] / f["ours_range_s"]
    extra = f["theirs_range_samples"] - f["ours_range_samples"]
    lines = [
        MARK_START,
        "## Prometheus client: gpuwaste's vs prometheus-api-client "
        "(`bench/ingest_prometheus_clients.py`)",
        "",
        f"Measured {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')} on {platform.node()} "
        f"({platform.processor() or platform.machine()}, 2 cores shared with other work; "
        f"1-minute load {f['load_before']:.1f} before, {f['load_after']:.1f} after), "
        f"Prometheus 2.42 on loopback, Python {platform.python_version()}, "
        f"prometheus-api-client 0.7.2. Cluster: the project generator, {f['gpus']} GPUs x "
        f"{f['days']:g} day(s) at 15 s (seed 1). Best of {REPEATS}, the two clients interleaved "
        "in one process.",
        "",
        "| what | gpuwaste `PrometheusClient` | prometheus-api-client | ratio (theirs / ours) |",
        "| --- | --- | --- | --- |",
        f"| the {f['queries']} raw range selections of one ingest (fetch + decode) | "
        f"{f['ours_query_s']:.2f} s -> polars, {f['ours_samples']:,} samples | "
        f"{f['theirs_query_s']:.2f} s -> Python lists (`custom_query`), "
        f"{f['theirs_samples']:,} samples | **{q_ratio:.2f}x** |",
        f"| `{RANGE_METRIC}` over the window ({f['windows']} one-hour chunks) | "
        f"{f['ours_range_s']:.2f} s, {f['ours_range_samples']:,} samples | "
        f"{f['theirs_range_s']:.2f} s (`get_metric_range_data`), "
        f"{f['theirs_range_samples']:,} samples ({extra:+,} at chunk edges) | "
        f"**{r_ratio:.2f}x** |",
        "",
        "prometheus-api-client also sets no timeout unless given one, raises "
        "requests' `RetryError` rather than an exception of its own when retries run out, and reads naive "
        "datetimes as local time (`datetime.timestamp()`).",
        MARK_END,
    ]
    return "\n".join(lines) + "\n"


def write_results(path: Path, section: str) -> None:
    """Replace this benchmark's section of RESULTS.md (or add it after the ingest section)."""
    text = path.read_text()
    if MARK_START in text and MARK_END in text:
        head, rest = text.split(MARK_START, 1)
        tail = rest.split(MARK_END, 1)[1]
        text = head + section.rstrip("\n") + tail
    else:
        anchor = "<!-- bench/ingest_prometheus.py: end -->"
        text = text.replace(anchor, anchor + "\n\n" + section.rstrip("\n"), 1)
    path.write_text(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpus", type=int, default=32)
    ap.add_argument("--days", type=float, default=1.0)
    ap.add_argument("--results", type=Path, default=REPO / "bench" / "RESULTS.md")
    ap.add_argument("--no-write", action="store_true", help="Print only; leave RESULTS.md alone.")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpuwaste-bench-") as tmp:
        figures = run(args.gpus, args.days, Path(tmp))
    print(json.dumps(figures, indent=1, default=str))
    section = report(figures)
    print(section)
    if not args.no_write:
        write_results(args.results, section)


if __name__ == "__main__":
    main()
