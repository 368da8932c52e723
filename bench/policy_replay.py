"""Benchmark: does a 10-threshold `gpuwaste policy replay` sweep finish within 10 s on the 1 M-job
warehouse of the dashboard benchmark?

    .venv/bin/python bench/policy_replay.py [--jobs 1000000] [--data-dir D] [--keep] [--repeat 3]

1. writes the result warehouse bench/dashboard.py measures (bench/harness/result_warehouse.py:
   1 M jobs, ~3.5 M job x GPU rows, ~2.5 M idle slots), or reuses --data-dir if it has one;
2. times, each on a fresh connection (the median of --repeat runs):
   - baseline: one bare DuckDB pass reading the columns the replay reads from job_usage,
     job_gpu_usage and idle_slots (count and sums, no logic);
   - the replay with one threshold;
   - the sweep of 10 thresholds in one pass (what `--idle-hours 0.5,1,...` runs);
   - the same 10 thresholds as 10 separate replays (one query per threshold);
3. prints a markdown table for bench/RESULTS.md with the ratios to the baseline.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

from harness.result_warehouse import build_result_warehouse  # noqa: E402

from gpuwaste.act.policy.replay import open_warehouse, replay  # noqa: E402
from gpuwaste.act.policy.rule import Rule  # noqa: E402
from gpuwaste.warehouse.catalog import connect  # noqa: E402
from gpuwaste.warehouse.store import Warehouse  # noqa: E402

SWEEP = (0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0)
BARE_SCAN = """
select
    (select count(*) + sum(gpu_s) from job_usage where start_ts is not null),
    (select count(*) + sum(epoch(end_ts - start_ts)) + sum(missing_s) from job_gpu_usage),
    (select count(*) + sum(epoch(end_ts - start_ts)) from idle_slots)
"""


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def timed(data_dir: Path, work: Callable[..., object], repeat: int) -> tuple[float, float, object]:
    """Median wall seconds and median CPU seconds (user + system, all threads) of `work(con)` on
    a fresh connection each time, and its last result."""
    walls, cpus, out = [], [], None
    for _ in range(repeat):
        con = open_warehouse(data_dir, None)
        try:
            t, c = time.perf_counter(), cpu_s()
            out = work(con)
            walls.append(time.perf_counter() - t)
            cpus.append(cpu_s() - c)
        finally:
            con.close()
    return statistics.median(walls), statistics.median(cpus), out


def machine() -> str:
    cpus = os.cpu_count()
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return f"{platform.processor() or platform.machine()}, {cpus} cores, load {load}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--data-dir", type=Path)
    ap.add_argument("--keep", action="store_true", help="Keep the warehouse folder.")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="gpuwaste-policy-bench-"))
    built = False
    if not Warehouse(data_dir).has_files("idle_slots"):
        t = time.perf_counter()
        build_result_warehouse(data_dir, n_jobs=args.jobs, drill_jobs=20)
        print(f"built {args.jobs:,} jobs in {time.perf_counter() - t:.1f} s", file=sys.stderr)
        built = True
    try:
        con = connect(data_dir)
        sizes = con.execute(
            "select (select count(*) from job_usage), (select count(*) from job_gpu_usage), "
            "(select count(*) from idle_slots)"
        ).fetchone()
        con.close()
        assert sizes is not None
        single = Rule((2.0,))
        sweep = Rule(SWEEP)
        base = timed(data_dir, lambda c: c.sql(BARE_SCAN).fetchall(), args.repeat)
        one = timed(data_dir, lambda c: replay(c, single), args.repeat)
        swept = timed(data_dir, lambda c: replay(c, sweep), args.repeat)
        loop = timed(
            data_dir, lambda c: [replay(c, Rule((h,))) for h in SWEEP], max(1, args.repeat // 3)
        )
        df = swept[2]
        print(f"Machine: {machine()}; DuckDB threads: default (all cores).")
        print(
            f"Warehouse: {sizes[0]:,} jobs, {sizes[1]:,} job x GPU rows, {sizes[2]:,} idle slots."
        )
        print()
        print("| step | wall s | CPU s (all threads) | wall x baseline |")
        print("| --- | ---: | ---: | ---: |")
        for name, (wall, cpu, _) in (
            ("baseline: one bare pass over the columns the replay reads", base),
            ("replay, 1 threshold (2 h)", one),
            (f"**replay sweep, {len(SWEEP)} thresholds in one pass**", swept),
            (f"{len(SWEEP)} thresholds as {len(SWEEP)} separate replays", loop),
        ):
            print(f"| {name} | {wall:.2f} | {cpu:.2f} | {wall / base[0]:.1f}x |", flush=True)
        print(f"Load after the runs: {', '.join(f'{x:.1f}' for x in os.getloadavg())}.")
        total = df.filter(df["vc"] == "(all)")  # type: ignore[attr-defined]
        print()
        print("Sweep totals (jobs hit, wrongful hits) per threshold: " + ", ".join(
            f"{r['idle_hours']:g} h: {r['jobs_hit']:,} / {r['wrongful_hits']:,}"
            for r in total.iter_rows(named=True)
        ))  # fmt: skip
    finally:
        if built and not args.keep and args.data_dir is None:
            shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
