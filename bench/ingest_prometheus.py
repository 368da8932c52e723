"""Benchmark: ingest a generated cluster from a real Prometheus, against the raw HTTP baseline.

    .venv/bin/python bench/ingest_prometheus.py [--gpus 256] [--days 2] [--results bench/RESULTS.md]
    .venv/bin/python bench/ingest_prometheus.py --clients [--gpus 32] [--days 1]

1. Writes the project generator's cluster (`gpuwaste.generate.write_all`, 15 s samples) and
   backfills it into a temporary Prometheus (Debian's `prometheus` + `promtool`).
2. Runs gpuwaste's Prometheus ingest over the whole window into a fresh warehouse, recording
   every HTTP request it makes and the time spent inside them.
3. Replays exactly those requests with a plain `requests.Session` (same headers) and decodes each
   body with `json.loads`: the "raw fetch + JSON decode" baseline.

Figures: total ingest time vs the baseline (target: within 2x), and samples per second from
JSON to parquet (ingest time minus time waiting on HTTP; target: at least 1 M samples/s).

With `--clients` (default 32 GPUs x 1 day): gpuwaste's `PrometheusClient` against
prometheus-api-client (`pip install -e '.[bench]'`) on the same real Prometheus, in one process,
interleaved, best of `REPEATS`:

- the raw range selections one gpuwaste ingest of the window makes (`metric{}[<window>ms]` at
  each window's end), fetched and decoded by gpuwaste's `query` (requests, body -> polars) and by
  prometheus-api-client's `custom_query` (requests, body -> `json` -> Python lists: it would
  still have to become a frame);
- one metric over the whole window in one-hour chunks: prometheus-api-client's
  `get_metric_range_data` against gpuwaste's half-open windows of raw selections: time, and the
  samples each returns (prometheus-api-client's chunks overlap at their edges).

Ratios are prometheus-api-client / gpuwaste: above 1, gpuwaste is faster.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl
import requests

REPO = Path(__file__).resolve().parent.parent

from harness.prometheus import PrometheusServer  # noqa: E402

from gpuwaste.config import ClusterConfig, PrometheusSource, Settings  # noqa: E402
from gpuwaste.generate import GeneratorSpec, write_all  # noqa: E402
from gpuwaste.ingest.prometheus.client import PrometheusClient  # noqa: E402
from gpuwaste.ingest.prometheus.rows import GPU_METRICS, HOST_METRICS  # noqa: E402
from gpuwaste.ingest.prometheus.source import (  # noqa: E402
    ingest_prometheus,
    plan_windows,
    window_length,
)

MARK_START = "<!-- bench/ingest_prometheus.py: start -->"
MARK_END = "<!-- bench/ingest_prometheus.py: end -->"
HISTORY_HEAD = (
    "| run (UTC) | cluster | load before / after | gpuwaste ingest | raw fetch + json.loads "
    "| ratio | JSON to parquet (replay) |"
)
HISTORY_SLOT = "<!-- history rows -->"
REPLAYS = 2
CLIENTS_START = "<!-- bench/ingest_prometheus.py --clients: start -->"
CLIENTS_END = "<!-- bench/ingest_prometheus.py --clients: end -->"
REPEATS = 3
RANGE_METRIC = "DCGM_FI_DEV_GPU_UTIL"
RANGE_CHUNK = timedelta(hours=1)  # the same chunks for both clients: their edges are compared


def _iso(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def run(gpus: int, days: float, workdir: Path) -> dict[str, Any]:
    figures: dict[str, Any] = {"gpus": gpus, "days": days, "interval_s": 15}
    figures["load_before"] = os.getloadavg()[0]
    t = time.perf_counter()
    spec = GeneratorSpec(seed=1, gpus=gpus, days=days)
    write_all(spec, workdir / "gen")
    figures["generate_s"] = time.perf_counter() - t
    truth = json.loads((workdir / "gen" / "truth.json").read_text())
    figures["planted_samples"] = truth["openmetrics_samples"]
    server = PrometheusServer(workdir / "gen" / "metrics.om", workdir / "prom")
    figures["backfill_s"] = server.backfill()
    server.start()
    try:
        calls: list[tuple[str, Any]] = []
        bodies: list[bytes] = []
        http_s = [0.0]
        original = PrometheusClient.get

        def recording_get(self: PrometheusClient, path: str, params: Any) -> bytes:
            t0 = time.perf_counter()
            body = original(self, path, params)
            http_s[0] += time.perf_counter() - t0
            calls.append((path, params))
            bodies.append(body)
            return body

        PrometheusClient.get = recording_get  # type: ignore[method-assign]
        try:
            cluster = ClusterConfig(name="bench", prometheus=PrometheusSource(url=server.url))
            t = time.perf_counter()
            result = ingest_prometheus(
                Settings(data_dir=workdir / "warehouse"),
                cluster,
                since=_iso(truth["window"]["start"]),
                until=_iso(truth["window"]["end"]),
                quiet=True,
            )
            figures["ingest_s"] = time.perf_counter() - t
        finally:
            PrometheusClient.get = original  # type: ignore[method-assign]
        figures["ingest_http_s"] = http_s[0]
        figures["requests"] = len(calls)
        figures["rows_written"] = result.written
        samples = int(result.note.split(" samples fetched")[0].split(", ")[-1].replace(",", ""))
        figures["samples_fetched"] = samples

        # the baseline: the same requests, raw fetch + json.loads
        session = requests.Session()
        session.headers.update({"Accept": "application/json", "Accept-Encoding": "identity"})
        t = time.perf_counter()
        decoded = 0
        for path, params in calls:
            resp = session.get(f"{server.url}{path}", params=params, timeout=300)
            resp.raise_for_status()
            payload = json.loads(resp.content)
            decoded += len(payload["data"])
        figures["raw_fetch_decode_s"] = time.perf_counter() - t
        t = time.perf_counter()
        for path, params in calls:
            session.get(f"{server.url}{path}", params=params, timeout=300).content  # noqa: B018
        figures["raw_fetch_only_s"] = time.perf_counter() - t
        t = time.perf_counter()
        for body in bodies:
            json.loads(body)
        figures["json_loads_only_s"] = time.perf_counter() - t
    finally:
        server.stop()

    # JSON to parquet alone: the same ingest, its HTTP answers replayed from memory (no server
    # competing for the two cores), into a fresh warehouse.
    # best of REPLAYS: the other work on the machine comes and goes
    replay = iter(bodies)

    def replaying_get(self: PrometheusClient, path: str, params: Any) -> bytes:
        return next(replay)

    best = float("inf")
    PrometheusClient.get = replaying_get  # type: ignore[method-assign]
    try:
        for n in range(REPLAYS):
            replay = iter(bodies)
            t = time.perf_counter()
            ingest_prometheus(
                Settings(data_dir=workdir / f"warehouse-replay-{n}"),
                ClusterConfig(name="bench", prometheus=PrometheusSource(url=server.url)),
                since=_iso(truth["window"]["start"]),
                until=_iso(truth["window"]["end"]),
                quiet=True,
            )
            best = min(best, time.perf_counter() - t)
    finally:
        PrometheusClient.get = original  # type: ignore[method-assign]
    figures["replay_json_to_parquet_s"] = best
    figures["replay_samples_per_s"] = samples / figures["replay_json_to_parquet_s"]
    figures["load_after"] = os.getloadavg()[0]
    figures["ratio_vs_raw"] = figures["ingest_s"] / figures["raw_fetch_decode_s"]
    parse_write_s = figures["ingest_s"] - figures["ingest_http_s"]
    figures["json_to_parquet_s"] = parse_write_s
    figures["json_to_parquet_samples_per_s"] = samples / parse_write_s
    return figures


def report(f: dict[str, Any]) -> str:
    rows = f["rows_written"]
    lines = [
        MARK_START,
        "## Ingest from Prometheus (`bench/ingest_prometheus.py`)",
        "",
        f"Measured {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')} on {platform.node()} "
        f"({platform.processor() or platform.machine()}, 2 cores shared with other work), "
        f"Prometheus 2.42 on loopback, Python {platform.python_version()}; 1-minute load "
        f"average {f['load_before']:.1f} before and {f['load_after']:.1f} after the run (other "
        "engineers' tests and benchmarks on the same two cores: absolute times are inflated, "
        "the ratios are measured side by side).",
        "",
        f"Cluster: the project generator, {f['gpus']} GPUs x {f['days']:g} days at 15 s "
        f"(seed 1): {f['samples_fetched']:,} samples fetched (3 DCGM and 3 node-exporter "
        f"families) "
        f"({rows.get('gpu_samples', 0):,} gpu_samples rows, "
        f"{rows.get('host_samples', 0):,} host_samples rows) in {f['requests']} requests.",
        "",
        "| step | time | note |",
        "| --- | --- | --- |",
        f"| generate (write_all) | {f['generate_s']:.1f} s | |",
        f"| promtool backfill | {f['backfill_s']:.1f} s | |",
        f"| **gpuwaste ingest** (fetch, parse, write parquet, watermarks) | **{f['ingest_s']:.1f} s** | "
        f"of which waiting on HTTP {f['ingest_http_s']:.1f} s |",
        f"| raw fetch + `json.loads`, same requests | {f['raw_fetch_decode_s']:.1f} s | baseline |",
        f"| raw fetch only | {f['raw_fetch_only_s']:.1f} s | |",
        f"| `json.loads` of the same bodies only | {f['json_loads_only_s']:.1f} s | |",
        f"| gpuwaste ingest replaying the recorded answers (no HTTP) | "
        f"{f['replay_json_to_parquet_s']:.1f} s | JSON to parquet alone, best of {REPLAYS} |",
        "",
        f"- gpuwaste / baseline: **{f['ratio_vs_raw']:.2f}x** (target: at most 2x).",
        f"- JSON to parquet, replayed answers: {f['replay_json_to_parquet_s']:.1f} s, "
        f"**{f['replay_samples_per_s'] / 1e6:.2f} M samples/s** (target: at least 1 M/s); "
        f"inside the live run (ingest time minus HTTP wait, the server sharing the cores): "
        f"{f['json_to_parquet_samples_per_s'] / 1e6:.2f} M samples/s. For scale, `json.loads` "
        f"alone of the same bodies ran at "
        f"{f['samples_fetched'] / f['json_loads_only_s'] / 1e6:.2f} M samples/s in this run.",
        "- Why it can beat `json.loads`: the body's `values` arrays are rewritten as CSV and read by "
        "polars; only the label sets go through `json` (gpuwaste/ingest/prometheus/parse.py).",
        "",
        "Every full-size run so far (the machine's load varies a lot; compare within a row):",
        "",
        HISTORY_HEAD,
        "| --- | --- | --- | --- | --- | --- | --- |",
        HISTORY_SLOT,
        MARK_END,
    ]
    return "\n".join(lines) + "\n"


def history_row(f: dict[str, Any]) -> str:
    return (
        f"| {datetime.now(UTC).strftime('%Y-%m-%d %H:%M')} | {f['gpus']} x {f['days']:g} d "
        f"| {f['load_before']:.1f} / {f['load_after']:.1f} | {f['ingest_s']:.1f} s "
        f"| {f['raw_fetch_decode_s']:.1f} s | {f['ratio_vs_raw']:.2f}x "
        f"| {f['replay_samples_per_s'] / 1e6:.2f} M/s |"
    )


def write_results(path: Path, section: str, row: str) -> None:
    """Replace this benchmark's section, keeping the history rows of earlier runs."""
    text = path.read_text() if path.exists() else "# Benchmark results\n\n"
    rows = [row] if row else []
    if MARK_START in text and MARK_END in text:
        head, rest = text.split(MARK_START, 1)
        old, tail = rest.split(MARK_END, 1)
        earlier = [ln for ln in old.splitlines() if ln.startswith("| 20") and ln.count("|") == 8]
        section = section.replace(HISTORY_SLOT, "\n".join([*earlier, *rows]))
        text = head + section.rstrip("\n") + tail
    else:
        section = section.replace(HISTORY_SLOT, "\n".join(rows))
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text)


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


def run_clients(gpus: int, days: float, workdir: Path) -> dict[str, Any]:
    from prometheus_api_client import PrometheusConnect  # the `bench` extra, only here

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


def report_clients(f: dict[str, Any]) -> str:
    q_ratio = f["theirs_query_s"] / f["ours_query_s"]
    r_ratio = f["theirs_range_s"] / f["ours_range_s"]
    extra = f["theirs_range_samples"] - f["ours_range_samples"]
    lines = [
        CLIENTS_START,
        "## Prometheus client: gpuwaste's vs prometheus-api-client "
        "(`bench/ingest_prometheus.py --clients`)",
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
        CLIENTS_END,
    ]
    return "\n".join(lines) + "\n"


def write_clients_results(path: Path, section: str) -> None:
    """Replace this benchmark's section of RESULTS.md (or add it after the ingest section)."""
    text = path.read_text()
    if CLIENTS_START in text and CLIENTS_END in text:
        head, rest = text.split(CLIENTS_START, 1)
        tail = rest.split(CLIENTS_END, 1)[1]
        text = head + section.rstrip("\n") + tail
    else:
        text = text.replace(MARK_END, MARK_END + "\n\n" + section.rstrip("\n"), 1)
    path.write_text(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clients", action="store_true", help="gpuwaste's vs prometheus-api-client.")
    ap.add_argument("--gpus", type=int, default=None, help="default 256 (--clients: 32)")
    ap.add_argument("--days", type=float, default=None, help="default 2 (--clients: 1)")
    ap.add_argument("--results", type=Path, default=REPO / "bench" / "RESULTS.md")
    ap.add_argument("--no-write", action="store_true", help="Print only; leave RESULTS.md alone.")
    args = ap.parse_args()
    gpus = args.gpus or (32 if args.clients else 256)
    days = args.days or (1.0 if args.clients else 2.0)
    with tempfile.TemporaryDirectory(prefix="gpuwaste-bench-") as tmp:
        figures = (run_clients if args.clients else run)(gpus, days, Path(tmp))
    print(json.dumps(figures, indent=1, default=str))
    section = (report_clients if args.clients else report)(figures)
    print(section)
    if args.no_write:
        return
    if args.clients:
        write_clients_results(args.results, section)
        return
    full = gpus >= 256 and days >= 2
    write_results(args.results, section, history_row(figures) if full else "")


if __name__ == "__main__":
    main()
