"""The same batches in a large warehouse and in a small one made of their jobs alone: does a
batch's peak RSS depend on anything but its own jobs and samples?

    python bench/same_batch.py --days 112 --work /tmp/bench-112d --batches 0,1   # longer history
    python bench/same_batch.py --gpus 4096 --work /tmp/bench-8x --batches 0,4    # wider cluster

The large warehouse is bench/analyze.py's (`prepare`: generated once into WORK/warehouse, one
cluster). The small one (WORK/same_batch/warehouse, made anew each time) holds the jobs and
allocations of the chosen batches only, of the samples only the days and hosts those jobs reach
(each day's blocks filtered, the empty ones left out, and written as the warehouse writes
them), and the large one's watermark, so that a running job ends at the same time in both. With
`--against one-file`, the other warehouse is instead the large one with each day of samples in
one file rather than in blocks of hosts (WORK/same_batch/one-file, made once), to measure what
the blocks change:

    python bench/same_batch.py --gpus 8192 --work /tmp/bench-16x --batches 7,15 --against one-file

Each run is a fresh process that plans `gpuwaste analyze --rebuild` and runs the chosen batches
one after the other, the first of them as the process's first batch (as in `gpuwaste analyze`),
and stops before anything is committed; the two warehouses alternate, each first every other
round. Each batch must hold the same jobs in both and compute the same rows (a digest of every
per-job result table, over every run): an allocation that shares its GPU with a job left out of
the small warehouse would not, and the script then fails. It prints each batch's peak RSS
(sampled every 10 ms, as bench/batch_peaks.py) in both, their medians, the ratio large / small,
and the RSS when the batch started.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import shutil
import statistics
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn, TypedDict

REPO = Path(__file__).resolve().parents[1]

# The `gpuwaste` command's allocator settings first: polars reads its own when it is first
# imported (bench/analyze.py imports polars)
from gpuwaste.process import configure_process  # noqa: E402

configure_process()

from gpuwaste.analyses.batch import BatchPlan, staged_file  # noqa: E402, I001
from gpuwaste.analyses.registry import PER_JOB_TABLES  # noqa: E402

import polars as pl  # noqa: E402
from analyze import cluster_arguments, prepare  # noqa: E402  (bench/analyze.py)
from batch_peaks import GIB, child_json, measured_batch, rss  # noqa: E402  (bench/batch_peaks.py)

CLUSTER = "bench"


class Stop(Exception):
    """Raised by an engine once it is done: the analyze stops before its commit."""


class BatchRun(TypedDict):
    """One batch run in a fresh process: its index, the RSS when it started and its peak (GiB),
    the watermark it analyzed up to, and the digest of its rows."""

    batch: int
    start_rss: float
    peak: float
    as_of: str
    digest: str


class PlanExport:
    """An engine that runs no batch: it copies the plan's (batch, job_id) rows to `dest`, and
    keeps the run's watermark in `as_of`."""

    def __init__(self, dest: Path) -> None:
        self.dest = dest
        self.as_of = ""

    def run(self, plan: BatchPlan, data_dir: Path, staging: Path) -> NoReturn:
        pl.read_parquet(plan.file).select("batch", "job_id").write_parquet(self.dest)
        self.as_of = plan.template.as_of
        raise Stop


class ChosenBatches:
    """An engine that runs only the batches `indices`, one after the other, into `runs`."""

    def __init__(self, indices: list[int]) -> None:
        self.indices = indices
        self.runs: list[BatchRun] = []

    def run(self, plan: BatchPlan, data_dir: Path, staging: Path) -> NoReturn:
        for i in self.indices:
            spec = plan.spec(i)
            start_rss = rss() / GIB
            outcome, peak = measured_batch(spec, data_dir, staging)
            if outcome.error or outcome.failed_jobs:
                raise SystemExit(f"batch {i} failed: {outcome.error or outcome.failed_jobs}")
            self.runs.append(
                BatchRun(batch=i, start_rss=start_rss, peak=peak, as_of=spec.as_of, digest="")
            )
        for run in self.runs:  # after every batch, so that no digest weighs on a batch's peak
            run["digest"] = digest(staging, run["batch"])
        raise Stop


def digest(staging: Path, index: int) -> str:
    """A digest of every per-job result table the batch `index` staged, whatever its row order."""
    h = hashlib.sha256()
    for name in PER_JOB_TABLES:
        path = staged_file(staging, name, index)
        if path.exists():
            rows = pl.read_parquet(path).hash_rows(seed=0)
            h.update(name.encode())
            h.update(rows.sort().to_numpy().tobytes())
    return h.hexdigest()[:16]


def child(data: Path, indices: list[int], export: Path | None) -> None:
    """Plan an analyze of `data` in this process and run one of the engines above in it; prints
    what it learned as JSON."""
    from gpuwaste.analyses.run import analyze_cluster
    from gpuwaste.config import Settings
    from gpuwaste.warehouse.lock import writer_lock

    engine = PlanExport(export) if export is not None else ChosenBatches(indices)
    with writer_lock(data, "analyze"), contextlib.suppress(Stop):  # stopped before the commit
        analyze_cluster(Settings(data_dir=data), CLUSTER, rebuild=True, engine=engine)
    out = {"as_of": engine.as_of} if isinstance(engine, PlanExport) else engine.runs
    print(json.dumps(out))


def run_child(data: Path, indices: list[int], export: Path | None = None) -> Any:
    """`child` in a fresh process: what it printed."""
    args = [__file__, "--child", str(data), "--batches", ",".join(map(str, indices))]
    return child_json(args + (["--export", str(export)] if export is not None else []))


def batch_jobs(data: Path, export: Path) -> tuple[dict[int, frozenset[str]], str]:
    """The job ids of every batch of a rebuild of `data`, by batch, and its watermark."""
    as_of = str(run_child(data, [], export)["as_of"])
    plan = pl.read_parquet(export)
    jobs = {
        int(b): frozenset(g["job_id"].to_list())
        for (b,), g in plan.group_by("batch", maintain_order=True)
    }
    return jobs, as_of


def make_small(large: Path, small: Path, jobs: frozenset[str], as_of: str) -> tuple[int, int]:
    """A warehouse at `small` with only `jobs` of the warehouse `large`, and of its samples only
    the days and hosts their allocations reach (as `sql/staging/allocations.sql` spans them),
    analyzed up to the same watermark `as_of`; returns (days, hosts)."""
    from gpuwaste.analyses.per_job import date_span
    from gpuwaste.analyses.state import SAMPLE_TABLES
    from gpuwaste.warehouse.bookkeeping import set_watermark
    from gpuwaste.warehouse.store import Warehouse, atomic_write_parquet

    shutil.rmtree(small, ignore_errors=True)
    big, wh = Warehouse(large), Warehouse(small)
    keep = pl.col("job_id").is_in(pl.Series(sorted(jobs)).implode())
    rows = {name: big.read(name, CLUSTER).filter(keep) for name in ("jobs", "job_gpus")}
    for name, frame in rows.items():
        wh.upsert(name, CLUSTER, "gen", frame.drop("cluster"))
    until = datetime.fromisoformat(as_of)
    set_watermark(wh, CLUSTER, "same_batch", until)  # the large warehouse's, not its own
    records = rows["jobs"].select("job_id", job_start="start_ts", job_end="end_ts")
    spans = (
        rows["job_gpus"]
        .join(records, on="job_id", how="left")
        .select(
            "host",
            start_ts=pl.coalesce("start_ts", "job_start"),
            end_ts=pl.coalesce("end_ts", "job_end", pl.lit(until)),
        )
        .filter(pl.col("end_ts") > pl.col("start_ts"))  # held, as allocations.sql keeps them
    )
    span = date_span(spans)
    if span is None:
        return 0, 0
    hosts = spans["host"].unique().implode()
    days: set[str] = set()
    for name in SAMPLE_TABLES:
        for day in big.day_files(name, CLUSTER, *span):  # each block of hosts of each day
            samples = pl.scan_parquet(day).filter(pl.col("host").is_in(hosts)).collect()
            if samples.height:
                atomic_write_parquet(
                    samples, wh.cluster_dir(name, CLUSTER) / day.parent.name / day.name
                )
                days.add(day.parent.name)
    return len(days), spans["host"].n_unique()


def make_one_file(large: Path, dest: Path) -> tuple[int, int]:
    """A warehouse at `dest` (made once) with the jobs, allocations and samples of `large`, each
    day of samples in one file, as before days were cut by hosts (`warehouse.host_blocks`): the
    day's blocks, in host order, written as one file by the warehouse's writer (a whole day in
    memory at once: 47 M rows at 8,192 GPUs). Returns (days, hosts)."""
    from gpuwaste.analyses.state import SAMPLE_TABLES
    from gpuwaste.warehouse.store import Warehouse, atomic_write_parquet

    big = Warehouse(large)
    if not any(p.name.startswith("hosts-from-") for p in big.day_files("gpu_samples", CLUSTER)):
        raise SystemExit(
            f"the warehouse at {large} has no day cut by hosts (at most 128 hosts, or written "
            "before days were cut): --against one-file would compare a layout with itself"
        )
    if not dest.exists():
        building = dest.with_name(dest.name + ".building")
        shutil.rmtree(building, ignore_errors=True)
        wh = Warehouse(building)
        for name in ("jobs", "job_gpus"):
            wh.upsert(name, CLUSTER, "gen", big.read(name, CLUSTER).drop("cluster"))
        for name in SAMPLE_TABLES:
            by_day: dict[str, list[Path]] = {}
            for path in big.day_files(name, CLUSTER):
                by_day.setdefault(path.parent.name, []).append(path)
            for day, files in by_day.items():
                one = wh.cluster_dir(name, CLUSTER) / day / "data.parquet"
                atomic_write_parquet(pl.read_parquet(files), one)
        building.rename(dest)
    wh = Warehouse(dest)
    days = {p.parent.name for p in wh.day_files("gpu_samples", CLUSTER)}
    return len(days), wh.read("job_gpus", CLUSTER)["host"].n_unique()


def main() -> None:
    ap = cluster_arguments(__doc__)
    ap.add_argument("--batches", default="0,1", help="the large warehouse's batches to compare")
    ap.add_argument("--runs", type=int, default=5, help="runs in each warehouse, alternated")
    ap.add_argument(
        "--against",
        choices=("small", "one-file"),
        default="small",
        help="small: a warehouse of the batches' jobs alone; one-file: the same warehouse with\n"
        "each day of samples in one file instead of blocks of hosts (made once, in\n"
        "WORK/same_batch/one-file)",
    )
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--export", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    try:
        indices = [int(b) for b in args.batches.split(",") if b]
    except ValueError:
        ap.error(f"--batches takes batch numbers separated by commas, not {args.batches!r}")
    if args.child:
        child(args.child, indices, args.export)
        return
    if not indices or len(set(indices)) < len(indices) or args.runs < 1:
        ap.error("--batches takes distinct batch numbers (e.g. 0,1), --runs at least 1")
    samples = prepare(args.work, args.gpus, args.days, args.seed)
    large = args.work / "warehouse"
    folder = args.work / "same_batch"
    folder.mkdir(parents=True, exist_ok=True)
    in_large, as_of = batch_jobs(large, folder / "plan-large.parquet")
    if not set(indices) <= set(in_large):
        ap.error(f"the large warehouse has batches 0 to {len(in_large) - 1}")
    chosen = frozenset().union(*(in_large[i] for i in indices))
    if args.against == "small":
        names = ("large", "small")
        small = folder / "warehouse"
        days, hosts = make_small(large, small, chosen, as_of)
    else:
        names = ("blocks", "one file")
        small = folder / "one-file" / "warehouse"
        days, hosts = make_one_file(large, small)
    in_small, small_as_of = batch_jobs(small, folder / "plan-small.parquet")
    if small_as_of != as_of:
        raise SystemExit(f"the {names[1]} warehouse is analyzed up to {small_as_of}, not {as_of}")
    pairs: dict[int, int] = {}  # large's batch -> small's batch with the same jobs
    for i in indices:
        same = [j for j, ids in in_small.items() if ids == in_large[i]]
        if not same:
            raise SystemExit(f"batch {i}'s jobs are not one batch of the {names[1]} warehouse")
        pairs[i] = same[0]
    print(
        f"{names[0]}: {samples:,} GPU samples ({args.gpus} GPUs x {args.days} days at 15 s), "
        f"{sum(map(len, in_large.values())):,} jobs in {len(in_large)} batches; {names[1]}: "
        f"{sum(map(len, in_small.values())):,} jobs in {len(in_small)} batches, samples of "
        f"{days} days x {hosts} hosts\n"
    )
    runs: dict[tuple[str, int], list[BatchRun]] = {}
    sides = [(names[0], large, indices), (names[1], small, [pairs[i] for i in indices])]
    for n in range(args.runs):
        for side, data, batches in sides if n % 2 == 0 else sides[::-1]:
            for r in run_child(data, batches):
                if r["as_of"] != as_of:
                    raise SystemExit(f"a {side} run analyzed up to {r['as_of']}, not {as_of}")
                runs.setdefault((side, r["batch"]), []).append(r)
    a_name, b_name = names
    print(
        f"| batch ({a_name}; {b_name}) | jobs | same rows | {a_name}: median peak GiB (each run) "
        f"| {b_name}: median peak GiB (each run) | {a_name} / {b_name} | RSS at its start GiB, "
        f"median ({a_name}; {b_name}) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    differ: list[int] = []
    for i in indices:
        a, b = runs[(a_name, i)], runs[(b_name, pairs[i])]
        if len({r["digest"] for r in a + b}) != 1:
            differ.append(i)
        ma, mb = (statistics.median(r["peak"] for r in x) for x in (a, b))
        sa, sb = (statistics.median(r["start_rss"] for r in x) for x in (a, b))
        each_a = " ".join(f"{r['peak']:.2f}" for r in a)
        each_b = " ".join(f"{r['peak']:.2f}" for r in b)
        print(
            f"| {i}; {pairs[i]} | {len(in_large[i]):,} | {'NO' if i in differ else 'yes'} "
            f"| {ma:.3f} ({each_a}) | {mb:.3f} ({each_b}) | {ma / mb:.3f} | {sa:.2f}; {sb:.2f} |"
        )
    print()
    if differ:
        raise SystemExit(f"batches {differ} did not compute the same rows in both warehouses")


if __name__ == "__main__":
    main()
