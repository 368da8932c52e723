"""The peak RSS of every batch of `gpuwaste analyze --rebuild` (the local engine), to tell what
one batch holds from what a run of many batches reaches: a run's peak is the largest of its
batches' (or of the driver's plan, commit and summaries). Each run is a fresh process; RSS is
sampled from /proc every 10 ms.

    python bench/batch_peaks.py                                  # 512 GPUs x 14 days (41 M)
    python bench/batch_peaks.py --days 112 --work /tmp/bench-112d --runs 2   # 8x the history

The warehouse is bench/analyze.py's (`prepare`: generated once into WORK/warehouse, one
cluster). A full batch holds at least half the jobs of the largest (not the small batch of jobs
that never started); the first batch runs in a fresh process and is left out of the median,
and the ratio printed is the run's peak against that median. Figures go to stdout as a markdown
table (copy into bench/RESULTS.md).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

# The `gpuwaste` command's allocator settings first: polars reads its own when it is first
# imported (bench/analyze.py imports polars)
from gpuwaste.process import configure_process  # noqa: E402

configure_process()

from gpuwaste.analyses.batch import BatchOutcome, BatchPlan, BatchSpec, stage_batch  # noqa: E402, I001

from analyze import cluster_arguments, prepare  # noqa: E402  (bench/analyze.py)

GIB = 1024**3
PAGE = os.sysconf("SC_PAGE_SIZE")


def rss() -> int:
    """This process's resident set, in bytes."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


@contextmanager
def sampled_peak() -> Iterator[list[int]]:
    """The largest RSS of this process while the block runs (sampled every 10 ms), in the one
    item of the list it yields, final when the block ends."""
    peak = [rss()]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.01):
            peak[0] = max(peak[0], rss())

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield peak
    finally:
        done.set()
        thread.join()
        peak[0] = max(peak[0], rss())


def measured_batch(spec: BatchSpec, data_dir: Path, staging: Path) -> tuple[BatchOutcome, float]:
    """`stage_batch(spec, ...)` in this process, and the largest RSS while it ran, in GiB."""
    with sampled_peak() as peak:
        outcome = stage_batch(spec, data_dir, staging)
    return outcome, peak[0] / GIB


class PeakEngine:
    """The local engine (every batch in this process, one after the other), with each batch's
    peak RSS and number of jobs."""

    def __init__(self) -> None:
        self.batches: list[tuple[float, int]] = []

    def run(self, plan: BatchPlan, data_dir: Path, staging: Path) -> list[BatchOutcome]:
        outcomes = []
        for i in range(plan.count):
            spec = plan.spec(i)
            outcome, peak = measured_batch(spec, data_dir, staging)
            outcomes.append(outcome)
            self.batches.append((peak, len(spec.job_ids)))
        return outcomes


def child_json(args: list[str]) -> Any:
    """Run `python ARGS` (a fresh process) and return the JSON its last line of output holds; a
    failed run stops the benchmark with the end of its stderr."""
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def child(data: Path) -> None:
    """One analyze in this process; prints its batches' peaks and its own as JSON."""
    from gpuwaste.analyses.run import analyze
    from gpuwaste.config import Settings

    engine = PeakEngine()
    t = time.perf_counter()
    analyze(Settings(data_dir=data), rebuild=True, quiet=True, engine=engine)
    wall = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB
    print(json.dumps({"wall": wall, "peak": peak, "batches": engine.batches}))


def main() -> None:
    ap = cluster_arguments(__doc__)
    ap.add_argument("--runs", type=int, default=1, help="runs, each a fresh process")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.child)
        return
    samples = prepare(args.work, args.gpus, args.days, args.seed)
    data = args.work / "warehouse"
    print(f"{samples:,} GPU samples ({args.gpus} GPUs x {args.days} days at 15 s)\n")
    print(
        "| run | wall s | batches | full batches after the first: median, sd, largest GiB "
        "| run's peak GiB | run / median | each batch: peak GiB (thousand jobs) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for n in range(1, args.runs + 1):
        r = child_json([__file__, "--child", str(data)])
        batches = [(float(p), int(j)) for p, j in r["batches"]]
        if not batches:
            print(f"| {n} | {r['wall']:.1f} | 0 | - | {r['peak']:.3f} | - | - |")
            continue
        largest = max(j for _, j in batches)
        full = [p for p, j in batches[1:] if 2 * j >= largest]
        stats, ratio = "-", "-"
        if full:
            median = statistics.median(full)
            stats = f"{median:.3f}, {statistics.pstdev(full):.3f}, {max(full):.3f}"
            ratio = f"{r['peak'] / median:.3f}"
        each = " ".join(f"{p:.2f} ({j / 1000:.0f})" for p, j in batches)
        print(
            f"| {n} | {r['wall']:.1f} | {len(batches)} | {stats} | {r['peak']:.3f} | {ratio} "
            f"| {each} |"
        )
    print()


if __name__ == "__main__":
    main()
