"""Benchmark: do 200 concurrent scrapers of `gpuwaste exporter` get answers (p99 under 1 s on 2
cores), and do idle connections let go of the server?

    .venv/bin/python bench/exporter_load.py [--jobs 20000] [--clients 200] [--scrapes 20]
                                            [--idle 400] [--rounds 1] [--data-dir D]

1. writes a result warehouse (tests/support/result_warehouse.py);
2. serves it, in a process of its own, from the exporter's server (gpuwaste/exporter/server.py)
   and, as the baseline, from prometheus_client's `start_http_server` (what the exporter used
   before issue #47), both over the same collector with its figures read once (cache_seconds
   3600, so every scrape serves figures in hand);
3. against each: `--clients` scrapers at once on loopback, `--scrapes` each in a row, from one
   event loop in this process (bench/harness/scrapers.py; 60 s timeout per scrape): latency
   percentiles and failures; then `--idle` connections that send nothing or half a request: the
   server's threads while they are open, and after its idle timeout (10 s) has passed.

Prints a markdown table for bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness.scrapers import percentile, scrape_concurrently

SERVERS = ("prometheus_client", "gpuwaste")
TIMEOUT_S = 60.0
P99 = "**p99, a failure counted as 60 s**"


def serve(kind: str, data_dir: Path, port_file: Path) -> None:
    """In the server's process: serve until killed, the port written to `port_file`."""
    from prometheus_client import CollectorRegistry, start_http_server

    from gpuwaste.exporter.collector import WasteCollector
    from gpuwaste.exporter.server import raise_open_files_limit, start

    raise_open_files_limit()
    collector = WasteCollector(data_dir, cache_seconds=3600)
    collector.refresh()
    if kind == "gpuwaste":
        port = start(collector, "127.0.0.1", 0).server_port
    else:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(collector)
        httpd, _ = start_http_server(0, addr="127.0.0.1", registry=registry)
        port = httpd.server_port
    port_file.write_text(str(port))
    while True:
        time.sleep(3600)


def threads_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    return -1


def measure(kind: str, data_dir: Path, args: argparse.Namespace) -> dict[str, str]:
    port_file = Path(tempfile.mkstemp(prefix="gpuwaste-bench-port-")[1])
    port_file.write_text("")
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", kind, "--data-dir", str(data_dir),
         "--port-file", str(port_file)]
    )  # fmt: skip
    try:
        while not port_file.read_text():
            assert proc.poll() is None, f"the {kind} server stopped"
            time.sleep(0.1)
        port = int(port_file.read_text())
        threads_idle = threads_of(proc.pid)
        t0 = time.perf_counter()
        scrapes = scrape_concurrently(
            "127.0.0.1", port, clients=args.clients, scrapes_each=args.scrapes, timeout_s=TIMEOUT_S
        )
        wall = time.perf_counter() - t0
        ok = [s.seconds for s in scrapes if s.status == 200]
        threads_after_load = threads_of(proc.pid)
        idle: list[socket.socket] = []
        for i in range(args.idle):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            if i % 2:
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            idle.append(s)
        time.sleep(2)
        threads_with_idle = threads_of(proc.pid)
        time.sleep(12)  # past the exporter's 10 s idle timeout
        closed = 0
        for s in idle:
            s.setblocking(False)
            with contextlib.suppress(BlockingIOError):  # still open: nothing to read
                closed += s.recv(1) == b""
            s.close()
        threads_later = threads_of(proc.pid)
    finally:
        proc.kill()
        proc.wait()
        port_file.unlink()
    n = len(scrapes)
    p99 = percentile(ok + [TIMEOUT_S] * (n - len(ok)), 0.99)
    return {
        "scrapes answered": f"{len(ok):,} of {n:,}",
        "p50 / p99 / max (s)": (
            f"{percentile(ok, 0.5):.3f} / {percentile(ok, 0.99):.3f} / {max(ok):.3f}" if ok else "-"
        ),
        P99: f"**{p99:.3f}**",
        "wall time (s)": f"{wall:.1f}",
        "threads: idle / after the load": f"{threads_idle} / {threads_after_load}",
        f"threads with {args.idle} idle connections (2 s)": str(threads_with_idle),
        "idle connections closed by the server after 14 s": f"{closed} of {args.idle}",
        "threads after 14 s": str(threads_later),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=20_000)
    ap.add_argument("--clients", type=int, default=200)
    ap.add_argument("--scrapes", type=int, default=20)
    ap.add_argument("--idle", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--data-dir", type=Path, default=None)
    ap.add_argument("--serve", choices=SERVERS, help=argparse.SUPPRESS)
    ap.add_argument("--port-file", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(args.serve, args.data_dir, args.port_file)
        return

    from harness.result_warehouse import build_result_warehouse

    made = args.data_dir is None
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="gpuwaste-bench-")) / "data"
    try:
        if not (data_dir / "parquet" / "job_usage").is_dir():
            build_result_warehouse(data_dir, n_jobs=args.jobs)
        load = os.getloadavg()[0]
        results: dict[str, list[dict[str, str]]] = {k: [] for k in SERVERS}
        for _ in range(args.rounds):
            for kind in SERVERS:  # interleaved: the machine's load falls on both alike
                results[kind].append(measure(kind, data_dir, args))
        print(
            f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on "
            f"{platform.node()} ({platform.machine()}, {os.cpu_count()} cores; 1-minute load "
            f"{load:.1f} before, {os.getloadavg()[0]:.1f} after), Python "
            f"{platform.python_version()}; {args.jobs:,} jobs, {args.clients} clients x "
            f"{args.scrapes} scrapes, {args.idle} idle connections.\n"
        )
        for r in range(args.rounds):
            print(f"| round {r + 1} | " + " | ".join(SERVERS) + " |")
            print("| --- | " + " | ".join("---" for _ in SERVERS) + " |")
            for key in results[SERVERS[0]][r]:
                print(f"| {key} | " + " | ".join(results[k][r][key] for k in SERVERS) + " |")
            base, ours = (float(results[k][r][P99].strip("*")) for k in SERVERS)
            print(f"\n- p99 (failures as 60 s), prometheus_client / gpuwaste: **{base / ours:.0f}x**; "
                  f"gpuwaste's p99 under 1 s: {'met' if ours < 1 else 'NOT met'}.\n")  # fmt: skip
    finally:
        if made:
            shutil.rmtree(data_dir.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
