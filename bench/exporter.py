"""Benchmark: does one scrape of `gpuwaste exporter` take at most 200 ms on 1 M jobs?

    .venv/bin/python bench/exporter.py [--jobs 1000000] [--data-dir D] [--keep] [--repeat 20]
                                       [--price 2.5]

1. writes (or reuses) the synthetic 1 M-job result warehouse of bench/dashboard.py
   (bench/harness/result_warehouse.py);
2. times reading the figures from the warehouse (the collector's refresh: the window hours, the
   idle running jobs, freshness and quarantine), cold, against a baseline in the same process:
   one bare DuckDB pass joining job_gpu_usage to job_usage, the least any per-VC figure needs;
3. starts the exporter's HTTP server on loopback and times scrapes with `requests`: the first
   one (which waits for the figures), scrapes served from the figures in hand, and scrapes that
   find them expired (answered at once while a read runs in the background, on the same cores),
   and every 50 ms while that read runs.

With `--price P`, the figures are read from a copy of the warehouse whose job_gpu_usage carries
the money `[cost]` would give at P per GPU hour (`gpu_cost`, `lost_cost`), so that the money
metric (`gpuwaste_wasted_money`) is computed and served too.

Prints a markdown table for bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import polars as pl
import requests

REPO = Path(__file__).resolve().parent.parent

from harness.result_warehouse import build_result_warehouse  # noqa: E402

from gpuwaste.exporter.collector import WasteCollector  # noqa: E402
from gpuwaste.exporter.server import start  # noqa: E402
from gpuwaste.warehouse.catalog import refresh_catalog  # noqa: E402
from gpuwaste.warehouse.readonly import read_only_connection  # noqa: E402
from gpuwaste.warehouse.store import Warehouse  # noqa: E402

TARGET_S = 0.200


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def baseline(data_dir: Path) -> float:
    con = read_only_connection(data_dir)
    try:
        sql = (
            "SELECT j.vc, sum(g.alloc_s) FROM job_gpu_usage g "
            "JOIN job_usage j USING (cluster, job_id) GROUP BY ALL"
        )
        return timed(lambda: con.sql(sql).fetchall())
    finally:
        con.close()


def priced_copy(data_dir: Path, price: float, into: Path) -> Path:
    """A copy of the warehouse at `into` whose job_gpu_usage has gpu_cost and lost_cost at
    `price` per GPU hour (as `gpuwaste analyze` with `[cost.gpu_hour] "*" = price` stores them)."""
    shutil.copytree(data_dir, into)
    wh = Warehouse(into)
    for cluster in wh.clusters("job_gpu_usage"):
        for path in sorted(wh.cluster_dir("job_gpu_usage", cluster).glob("*.parquet")):
            rows = pl.read_parquet(path).with_columns(
                gpu_cost=pl.col("alloc_s") / 3600 * price,
                lost_cost=(pl.col("idle_slot_s") + pl.col("never_used_s")) / 3600 * price,
            )
            wh.replace_file("job_gpu_usage", cluster, path.stem, rows)
    refresh_catalog(into, force=True)
    return into


def bench(data_dir: Path, repeat: int) -> dict[str, tuple[float, str]]:
    out: dict[str, tuple[float, str]] = {}
    reads = [timed(WasteCollector(data_dir).refresh) for _ in range(3)]
    bases = [baseline(data_dir) for _ in range(3)]
    read, base = statistics.median(reads), statistics.median(bases)
    out["read the figures (collector refresh), cold"] = (
        read,
        f"median of 3; {read / base:.1f}x the baseline",
    )
    out["baseline: one DuckDB pass, job_gpu_usage x job_usage per VC"] = (base, "median of 3")

    collector = WasteCollector(data_dir, cache_seconds=3600)
    httpd = start(collector, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{httpd.server_port}/metrics"
    try:
        first = timed(lambda: requests.get(url, timeout=120).raise_for_status())
        out["first scrape (waits for the figures)"] = (first, "once")
        served = [
            timed(lambda: requests.get(url, timeout=120).raise_for_status()) for _ in range(repeat)
        ]
        text = requests.get(url, timeout=120).text
        money = text.count("\ngpuwaste_wasted_money{")
        out["**scrape, figures in hand**"] = (
            statistics.median(served),
            f"median of {repeat}, max {max(served):.3f} s; {len(text):,} bytes, "
            f"{money} money series",
        )
        during: list[float] = []
        for _ in range(3):
            collector.cache_seconds = 0  # expired: the next scrape starts a background read
            during.append(timed(lambda: requests.get(url, timeout=120).raise_for_status()))
            collector.cache_seconds = 3600
            while collector.reading_in_background:  # a scrape every 50 ms while it reads
                during.append(timed(lambda: requests.get(url, timeout=120).raise_for_status()))
                time.sleep(0.05)
            collector.wait()
        out["**scrape, figures expired** (a read running in the background)"] = (
            statistics.median(during),
            f"median of {len(during)}, max {max(during):.3f} s",
        )
    finally:
        httpd.shutdown()
        httpd.server_close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--data-dir", type=Path, default=None)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--keep", action="store_true", help="keep the warehouse")
    ap.add_argument("--price", type=float, default=None, help="read a copy priced at this")
    args = ap.parse_args()
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="gpuwaste-bench-")) / "data"
    try:
        if (data_dir / "parquet" / "job_usage").is_dir():
            con = read_only_connection(data_dir)
            n = con.sql("SELECT count(*) FROM job_usage").fetchall()[0][0]
            con.close()
            print(f"reusing {data_dir}: {n:,} jobs")
        else:
            t0 = time.perf_counter()
            n = build_result_warehouse(data_dir, n_jobs=args.jobs, drill_jobs=20).jobs.height
            print(f"built {n:,} jobs in {time.perf_counter() - t0:.1f} s at {data_dir}")
        read_dir = data_dir
        if args.price is not None:
            read_dir = priced_copy(data_dir, args.price, Path(tempfile.mkdtemp()) / "priced")
            print(f"priced copy at {read_dir}: {args.price} per GPU hour")
        load0 = os.getloadavg()[0]
        try:
            results = bench(read_dir, args.repeat)
        finally:
            if read_dir != data_dir:
                shutil.rmtree(read_dir.parent, ignore_errors=True)
        load1 = os.getloadavg()[0]
        print(
            f"\n{n:,} jobs; {platform.node()} ({platform.machine()}, {os.cpu_count()} cores), "
            f"Python {platform.python_version()}; 1-minute load {load0:.1f} before, "
            f"{load1:.1f} after\n"
        )
        print("| what | seconds | note |\n| --- | --- | --- |")
        for what, (seconds, note) in results.items():
            print(f"| {what} | {seconds:.3f} | {note} |")
        scrape = max(results["**scrape, figures in hand**"][0],
                     results["**scrape, figures expired** (a read running in the background)"][0])  # fmt: skip
        verdict = "within" if scrape <= TARGET_S else "OVER"
        print(f"\nscrape: {scrape * 1000:.0f} ms, {verdict} the {TARGET_S * 1000:.0f} ms target")
    finally:
        if not args.keep and args.data_dir is None:
            shutil.rmtree(data_dir.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
