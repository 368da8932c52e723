"""The same batches in a large warehouse and in a small one made of their jobs alone: does a
batch's peak RSS depend on anything but its own jobs and samples?

    python bench/same_batch.py --days 112 --work /tmp/bench-112d --batches 0,1   # longer history
    python bench/same_batch.py --gpus 4096 --work /tmp/bench-8x --batches 0,4    # wider cluster

The large warehouse is bench/analyze.py's (`prepare`: generated once into WORK/warehouse, one
cluster). The small one (WORK/same_batch/warehouse, made anew each time) holds the jobs and
allocations of the chosen batches only, and of the samples only the days and hosts those jobs
reach (each day file filtered and written as the warehouse writes it).

Each run is a fresh process that plans `gpuwaste analyze --rebuild` and runs the chosen batches
one after the other, the first of them as the process's first batch (as in `gpuwaste analyze`),
and stops before anything is committed; the two warehouses alternate, run by run. The script
checks that each batch holds the same jobs and computes the same rows in both (a digest of every
per-job result table), and prints each batch's peak RSS (sampled every 10 ms, as
bench/batch_peaks.py) in both, their medians and the ratio large / small.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import shutil
import statistics
import subprocess
import sys
from datetime import date
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "bench")]

# gpuwaste first: it sets polars' allocator options, which polars reads when it is first
# imported (bench/analyze.py imports polars)
from gpuwaste.analyses.batch import BatchOutcome, BatchPlan, stage_batch, staged_file  # noqa: E402, I001

import polars as pl  # noqa: E402
from analyze import cluster_arguments, prepare  # noqa: E402  (bench/analyze.py)
from batch_peaks import GIB, sampled_peak  # noqa: E402  (bench/batch_peaks.py)

CLUSTER = "bench"


class Stop(Exception):
    """Raised by the engine once its batches are run: the analyze stops before its commit."""


class ChosenBatches:
    """An engine that runs only the batches `indices` (each batch's peak RSS, jobs and the digest
    of its rows in `runs`), or with `export` writes the plan's (batch, job_id) rows there and runs
    none; either way it then stops the analyze."""

    def __init__(self, indices: list[int], export: Path | None = None) -> None:
        self.indices = indices
        self.export = export
        self.runs: list[dict[str, object]] = []

    def run(self, plan: BatchPlan, data_dir: Path, staging: Path) -> list[BatchOutcome]:
        if self.export is not None:
            pl.read_parquet(plan.file).write_parquet(self.export)
            raise Stop
        for i in self.indices:
            spec = plan.spec(i)
            with sampled_peak() as peak:
                outcome = stage_batch(spec, data_dir, staging)
            if outcome.error:
                raise SystemExit(f"batch {i} failed: {outcome.error}")
            self.runs.append({"batch": i, "jobs": len(spec.job_ids), "peak": peak[0] / GIB})
        for run in self.runs:  # after every batch, so that no digest weighs on a batch's peak
            run["digest"] = digest(staging, int(str(run["batch"])))
        raise Stop


def digest(staging: Path, index: int) -> str:
    """A digest of every per-job result table the batch `index` staged, whatever its row order."""
    from gpuwaste.analyses.registry import PER_JOB_TABLES

    h = hashlib.sha256()
    for name in PER_JOB_TABLES:
        path = staged_file(staging, name, index)
        if path.exists():
            rows = pl.read_parquet(path).hash_rows(seed=0)
            h.update(name.encode())
            h.update(rows.sort().to_numpy().tobytes())
    return h.hexdigest()[:16]


def child(data: Path, indices: list[int], export: Path | None) -> None:
    """Plan an analyze of `data` in this process and run `ChosenBatches` in it; prints their
    figures as JSON."""
    from gpuwaste.analyses.run import analyze_cluster
    from gpuwaste.config import Settings

    engine = ChosenBatches(indices, export)
    with contextlib.suppress(Stop):  # the engine stops the analyze before its commit
        analyze_cluster(Settings(data_dir=data), CLUSTER, rebuild=True, engine=engine)
    print(json.dumps(engine.runs))


def run_child(data: Path, indices: list[int], export: Path | None = None) -> list[dict]:
    args = [
        sys.executable,
        __file__,
        "--child",
        str(data),
        "--batches",
        ",".join(map(str, indices)),
    ]
    if export is not None:
        args += ["--export", str(export)]
    proc = subprocess.run(args, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"a run over {data} failed:\n{proc.stderr[-3000:]}")
    runs: list[dict] = json.loads(proc.stdout.strip().splitlines()[-1])
    return runs


def batch_jobs(data: Path, export: Path) -> dict[int, frozenset[str]]:
    """The job ids of every batch of a rebuild of `data`, by batch."""
    run_child(data, [], export)
    plan = pl.read_parquet(export)
    return {
        int(b): frozenset(g["job_id"].to_list())
        for (b,), g in plan.group_by("batch", maintain_order=True)
    }


def make_small(large: Path, small: Path, jobs: frozenset[str]) -> tuple[int, int]:
    """A warehouse at `small` with only `jobs` of the warehouse `large`, and of its samples only
    the days and hosts their allocations reach; returns (days, hosts)."""
    from gpuwaste.warehouse.store import DATA_FILE, Warehouse, atomic_write_parquet

    shutil.rmtree(small, ignore_errors=True)
    big, wh = Warehouse(large), Warehouse(small)
    keep = pl.col("job_id").is_in(pl.Series(sorted(jobs)).implode())
    rows = {name: big.read(name, CLUSTER).filter(keep) for name in ("jobs", "job_gpus")}
    for name, frame in rows.items():
        wh.upsert(name, CLUSTER, "gen", frame.drop("cluster"))
    allocs, records = rows["job_gpus"], rows["jobs"]
    hosts = allocs["host"].unique()
    starts = pl.concat([allocs["start_ts"], records["start_ts"]]).drop_nulls()
    ends = pl.concat([allocs["end_ts"], records["end_ts"]])
    first: date = starts.min().date()  # type: ignore[union-attr]
    last = date.max if ends.null_count() else ends.max().date()  # type: ignore[union-attr]
    files = big.day_files("gpu_samples", CLUSTER, first, last)
    for day in files:
        samples = pl.read_parquet(day).filter(pl.col("host").is_in(hosts.implode()))
        dest = wh.cluster_dir("gpu_samples", CLUSTER) / day.parent.name / DATA_FILE
        atomic_write_parquet(samples, dest)
    days = len(files)
    return days, hosts.len()


def main() -> None:
    ap = cluster_arguments(__doc__)
    ap.add_argument("--batches", default="0,1", help="the large warehouse's batches to compare")
    ap.add_argument("--runs", type=int, default=5, help="runs in each warehouse, alternated")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--export", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    indices = [int(b) for b in args.batches.split(",") if b]
    if args.child:
        child(args.child, indices, args.export)
        return
    samples = prepare(args.work, args.gpus, args.days, args.seed)
    large = args.work / "warehouse"
    folder = args.work / "same_batch"
    folder.mkdir(parents=True, exist_ok=True)
    in_large = batch_jobs(large, folder / "plan-large.parquet")
    chosen = frozenset().union(*(in_large[i] for i in indices))
    days, hosts = make_small(large, folder / "warehouse", chosen)
    small = folder / "warehouse"
    in_small = batch_jobs(small, folder / "plan-small.parquet")
    pairs = {}  # large's batch -> small's batch with the same jobs
    for i in indices:
        same = [j for j, ids in in_small.items() if ids == in_large[i]]
        if not same:
            raise SystemExit(f"batch {i}'s jobs are not one batch of the small warehouse")
        pairs[i] = same[0]
    print(
        f"large: {samples:,} GPU samples ({args.gpus} GPUs x {args.days} days at 15 s), "
        f"{sum(map(len, in_large.values())):,} jobs in {len(in_large)} batches; small: "
        f"{len(chosen):,} jobs in {len(in_small)} batches, samples of {days} days x {hosts} "
        "hosts\n"
    )
    peaks: dict[tuple[str, int], list[float]] = {}
    digests: dict[tuple[str, int], set[str]] = {}
    for _ in range(args.runs):
        for side, data, batches in (
            ("large", large, indices),
            ("small", small, [pairs[i] for i in indices]),
        ):
            for r in run_child(data, batches):
                peaks.setdefault((side, r["batch"]), []).append(r["peak"])
                digests.setdefault((side, r["batch"]), set()).add(r["digest"])
    print(
        "| batch (large; small) | jobs | same rows | large: median peak GiB (each run) "
        "| small: median peak GiB (each run) | large / small |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for i in indices:
        a, b = peaks[("large", i)], peaks[("small", pairs[i])]
        same_rows = len(digests[("large", i)] | digests[("small", pairs[i])]) == 1
        each_a = " ".join(f"{p:.2f}" for p in a)
        each_b = " ".join(f"{p:.2f}" for p in b)
        ma, mb = statistics.median(a), statistics.median(b)
        print(
            f"| {i}; {pairs[i]} | {len(in_large[i]):,} | {'yes' if same_rows else 'NO'} "
            f"| {ma:.3f} ({each_a}) | {mb:.3f} ({each_b}) | {ma / mb:.3f} |"
        )
    print()


if __name__ == "__main__":
    main()
