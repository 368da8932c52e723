"""Benchmark `gpuwaste analyze --rebuild` against (a) one DuckDB lag/lead pass that finds runs of
zero utilization (the floor, docs components.md) and (b) a pandas groupby-apply of the per-job
metrics (what a notebook would do). Each runs in its own process; peak memory is its max RSS.

    python bench/analyze.py --gpus 512 --days 14 --work /tmp/bench   # >= 40 M samples
    python bench/analyze.py --gpus 64 --days 2 --skip-pandas          # quick
    python bench/analyze.py --work /tmp/bench --skip-pandas --repeat 5  # a noisy machine

Figures go to stdout as a markdown table (copy into bench/RESULTS.md), with the CPU time of the
analyses issue #45 added (`NEW_ANALYSES`) against the rest of the same run (target <= 20 %).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl

BASELINE_DUCKDB = """
import duckdb, sys
con = duckdb.connect()
con.execute("set memory_limit = '1500MB'")
glob = sys.argv[1]
rows = con.sql(f'''
with s as (
  select host, gpu, ts, util = 0 and mem_used_mib = 0 as idle from read_parquet('{glob}', hive_partitioning = true)
), w as (
  select host, gpu, ts, idle,
         lag(idle) over g as prev_idle, lead(idle) over g as next_idle,
         lag(ts) over g as prev_ts
  from s window g as (partition by host, gpu order by ts)
), b as (
  select host, gpu, ts, prev_ts, prev_idle is distinct from idle as run_start,
         next_idle is distinct from idle as run_end
  from w where idle and (prev_idle is distinct from idle or next_idle is distinct from idle)
), r as (
  select host, gpu, coalesce(prev_ts, ts) as start_ts,
         case when run_end then ts else lead(ts) over (partition by host, gpu order by ts) end as end_ts, run_start
  from b
)
select count(*) from r where run_start and epoch(end_ts - start_ts) > 60
''').fetchall()
print(rows[0][0])
"""

# `gpuwaste analyze --rebuild` as `python -m gpuwaste` runs it (the process's allocators set
# first, then the same `analyze` call), printing the CPU seconds of each phase
# (`ClusterRun.cpu_seconds`) as JSON, so that one run gives both its time and its steps' shares.
ANALYZE = """
import json, sys
from pathlib import Path
from gpuwaste.process import configure_process
configure_process()
from gpuwaste.analyses.run import analyze
from gpuwaste.config import load_settings
runs = analyze(load_settings(data_dir=Path(sys.argv[1])), rebuild=True,
               batch_days=int(sys.argv[2]), quiet=True)
print(json.dumps(runs[0].cpu_seconds))
"""

# The analyses issue #45 added (queueing causes, waiting behind idle GPUs, failures): its speed
# bound is their CPU time against the rest of `analyze` on this cluster.
NEW_ANALYSES = (
    "queue_causes",
    "queue_cause_summary",
    "queue_idle_overlap",
    "failure_attempts",
    "failure_reasons",
    "failure_retries",
)

BASELINE_PANDAS = """
import sys, glob
import pandas as pd
files = sorted(glob.glob(sys.argv[1]))
s = pd.concat([pd.read_parquet(f, columns=['host','gpu','ts','util','mem_used_mib','job_id']) for f in files])
s = s[s['job_id'].notna()]
def per_gpu(g):
    g = g.sort_values('ts')
    dt = g['ts'].diff().dt.total_seconds().fillna(0)
    idle = (g['util'] == 0) & (g['mem_used_mib'] == 0)
    run = (idle != idle.shift()).cumsum()
    runs = dt[idle].groupby(run[idle]).sum()
    return pd.Series({
        'util_mean': (g['util'] * dt).sum() / max(dt.sum(), 1e-9),
        'util_max': g['util'].max(),
        'mem_max': g['mem_used_mib'].max(),
        'never_used': bool(idle.all()),
        'idle_slot_s': runs[runs > 60].sum(),
    })
out = s.groupby(['job_id', 'host', 'gpu']).apply(per_gpu)
print(len(out))
"""


@dataclass(frozen=True)
class Timed:
    """One child process: wall seconds, CPU seconds (user + system, all its threads), peak RSS
    in GiB and its stdout."""

    wall: float
    cpu: float
    peak: float
    out: str


def timed(cmd: list[str]) -> Timed:
    """One child process, timed (GNU time gives each child's own peak; without it, the max
    over the children so far)."""
    gnu_time = shutil.which("time") or ("/usr/bin/time" if Path("/usr/bin/time").exists() else None)
    if gnu_time:
        cmd = [gnu_time, "-f", "PEAK_KB %M", *cmd]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[:5]} failed:\n{proc.stderr[-2000:]}")
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    peaks = [line for line in proc.stderr.splitlines() if line.startswith("PEAK_KB ")]
    peak_kb = int(peaks[-1].split()[1]) if peaks else after.ru_maxrss
    peak = peak_kb / 1024 / 1024
    return Timed(wall, cpu, peak, proc.stdout.strip())


def prepare(work: Path, gpus: int, days: float, seed: int) -> int:
    from gpuwaste.generate import (
        GeneratorSpec,
        job_gpus_frame,
        jobs_frame,
        simulate,
        write_samples_parquet,
    )
    from gpuwaste.warehouse.store import Warehouse

    spec = GeneratorSpec(seed=seed, gpus=gpus, days=days, cluster="bench")
    data = work / "warehouse"
    samples_dir = data / "parquet" / "gpu_samples" / "cluster=bench"
    if not samples_dir.exists():
        raw = work / "raw"
        write_samples_parquet(spec, raw)
        wh = Warehouse(data)
        for day in sorted(raw.glob("date=*")):  # into the warehouse contract, a day at a time
            df = pl.read_parquet(day / "part-0.parquet")
            first = datetime.fromisoformat(day.name.removeprefix("date=")).replace(tzinfo=UTC)
            wh.replace_window("gpu_samples", "bench", first, first + timedelta(days=1), df)
            (day / "part-0.parquet").unlink()
        cluster = simulate(spec)
        wh.upsert("jobs", "bench", "gen", jobs_frame(cluster))
        wh.upsert("job_gpus", "bench", "gen", job_gpus_frame(cluster))
    import duckdb

    con = duckdb.connect()
    n = con.execute(f"select count(*) from read_parquet('{samples_dir}/*/*.parquet')").fetchall()
    return int(n[0][0])


def cluster_arguments(doc: str | None) -> argparse.ArgumentParser:
    """The options of the generated benchmark cluster (`prepare`), shared by the analyze
    benchmarks."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--gpus", type=int, default=512)
    ap.add_argument("--days", type=float, default=14.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work", type=Path, default=Path("/tmp/gpuwaste-bench"))
    return ap


def main() -> None:
    ap = cluster_arguments(__doc__)
    ap.add_argument("--skip-pandas", action="store_true")
    ap.add_argument("--batch-days", type=int, default=7, help="gpuwaste analyze --batch-days")
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run the floor and analyze this many times, alternating, and report each pair's\n"
        "ratio and the median (on a noisy machine one pair can be off by 20 %%)",
    )
    args = ap.parse_args()
    samples = prepare(args.work, args.gpus, args.days, args.seed)
    data = args.work / "warehouse"
    glob = str(data / "parquet" / "gpu_samples" / "cluster=bench" / "*" / "*.parquet")
    py = sys.executable
    analyze = [py, "-c", ANALYZE, str(data), str(args.batch_days)]
    floors: list[Timed] = []
    runs: list[Timed] = []
    for _ in range(max(1, args.repeat)):
        floors.append(timed([py, "-c", BASELINE_DUCKDB, glob]))
        runs.append(timed(analyze))
    results = [("duckdb lag/lead pass (a)", _median(floors))]
    results.append(("gpuwaste analyze --rebuild", _median(runs)))
    if not args.skip_pandas:
        results.append(("pandas groupby-apply (b)", timed([py, "-c", BASELINE_PANDAS, glob])))
    print(f"{samples:,} GPU samples ({args.gpus} GPUs x {args.days} days at 15 s)\n")
    if len(runs) > 1:
        print(f"median of {len(runs)} alternating runs; peak: the largest\n")
    print("| implementation | wall s | CPU s | cores used | M samples/s | peak RSS GiB |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, r in results:
        print(
            f"| {name} | {r.wall:.1f} | {r.cpu:.1f} | {r.cpu / r.wall:.2f} | "
            f"{samples / r.wall / 1e6:.2f} | {r.peak:.2f} |"
        )
    floor, run = results[0][1], results[1][1]
    print(f"\nanalyze / floor (a): {run.wall / floor.wall:.1f}x (target <= 4x)")
    # With every core of the machine busy from start to end, a run would take its CPU time over
    # the cores: what the same work could take at best, and against the floor.
    cores = os.cpu_count() or 1
    print(
        f"in CPU time: {run.cpu / floor.cpu:.2f}x; with all {cores} cores busy throughout, "
        f"analyze would take {run.cpu / cores:.1f} s, {run.cpu / cores / floor.wall:.2f}x "
        "the floor's wall time"
    )
    if len(runs) > 1:
        pairs = ", ".join(
            f"{r.wall:.1f}/{f.wall:.1f} = {r.wall / f.wall:.2f}x"
            for f, r in zip(floors, runs, strict=True)
        )
        print(f"each pair, analyze / floor: {pairs}")
        print(f"analyze's peak RSS in each run: {', '.join(f'{r.peak:.2f}' for r in runs)} GiB")
    if len(results) > 2:
        print(f"pandas (b) / analyze: {results[2][1].wall / run.wall:.1f}x (target >= 5x)")
    print_new_analyses(runs)


def print_new_analyses(runs: list[Timed]) -> None:
    """The CPU time of `NEW_ANALYSES` against the rest of each run (its whole CPU time less
    theirs), the median ratio, and each of them (median seconds)."""
    steps = [json.loads(r.out.splitlines()[-1]) for r in runs]
    new = [sum(s.get(n, 0.0) for n in NEW_ANALYSES) for s in steps]
    ratios = sorted(n / (r.cpu - n) for n, r in zip(new, runs, strict=True))
    each = ", ".join(f"{n / (r.cpu - n):.1%}" for n, r in zip(new, runs, strict=True))
    print(
        f"\nissue #45's analyses / the rest of analyze, in CPU time: "
        f"{ratios[(len(ratios) - 1) // 2]:.1%} (target <= 20 %; each run: {each})"
    )
    for name in NEW_ANALYSES:
        secs = sorted(s.get(name, 0.0) for s in steps)
        print(f"  {name}: {secs[(len(secs) - 1) // 2]:.2f} CPU s")


def _median(runs: list[Timed]) -> Timed:
    """The median wall time of `runs` (with that run's CPU time), the largest peak, the last
    output."""
    middle = sorted(runs, key=lambda r: r.wall)[(len(runs) - 1) // 2]
    return Timed(middle.wall, middle.cpu, max(r.peak for r in runs), runs[-1].out)


if __name__ == "__main__":
    main()
