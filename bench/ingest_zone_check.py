"""Benchmark: what the wrong-time-zone check (`warehouse/diagnose.time_zone_misfit`, issue #46
item 3) adds to the ingest that writes jobs, where it runs after every such ingest.

    python bench/ingest_zone_check.py [--gpus 256] [--days 7] [--repeat 5]
        [--work /tmp/gpuwaste-bench-zone]

One generated cluster (`generate --seed 1`) whose GPU series do not name the job (DCGM's
default), so that its allocations are tied by whole host or scontrol: the allocations the check
samples. Its GPU samples go straight into a base warehouse, the generator's parquet writer's
rows with the job id left out and the device minor number in (as `ingest openmetrics` of its
DCGM series writes them: an OpenMetrics file of 256 GPUs x 7 days is some 10 GB, too big to
write and parse for a benchmark of the check). Each round copies the base twice and runs
`ingest slurm` (the generator's sacct file and scontrol captures) into each copy, in this
process, alternated: as shipped, and with `time_zone_misfit` replaced by one that says nothing
(the other checks kept); then times the check alone on the ingested warehouse. Prints the
medians of wall and CPU seconds (process CPU, all threads), the ingest's ratio with the check
to without it, and the check's seconds against the ingest's without it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import polars as pl

from gpuwaste.config import ClusterConfig, Settings, SlurmSource
from gpuwaste.generate import GeneratorSpec, simulate, write_samples_parquet
from gpuwaste.generate.sacct import sacct_text
from gpuwaste.generate.scontrol import write_captures
from gpuwaste.ingest.base import RunOptions
from gpuwaste.ingest.run import run_configured
from gpuwaste.ingest.sources import SOURCES
from gpuwaste.warehouse import diagnose
from gpuwaste.warehouse.store import Warehouse

CLUSTER = "bench"


def _timed(fn: Callable[[], object]) -> tuple[float, float, object]:
    """Wall and process CPU seconds of one call, and what it returned."""
    w, c = time.perf_counter(), time.process_time()
    got = fn()
    return time.perf_counter() - w, time.process_time() - c, got


def prepare(spec: GeneratorSpec, out: Path, base: Path) -> None:
    """The base warehouse's GPU samples, and out/sacct.txt and out/scontrol/ (written last)."""
    cluster = simulate(spec)
    minors = pl.DataFrame(
        [(h.name, g, m) for h in cluster.hosts for g, m in enumerate(h.minors)],
        schema={"host": pl.String, "gpu": pl.Int16, "gpu_minor": pl.Int16},
        orient="row",
    )
    raw = out / "raw"
    write_samples_parquet(spec, raw)
    wh = Warehouse(base)
    for day in sorted(raw.glob("date=*")):  # into the warehouse contract, a day at a time
        df = pl.read_parquet(day / "part-0.parquet").join(minors, on=["host", "gpu"])
        df = df.with_columns(job_id=pl.lit(None, pl.String), source=pl.lit("openmetrics"))
        first = datetime.fromisoformat(day.name.removeprefix("date=")).replace(tzinfo=UTC)
        wh.replace_window("gpu_samples", CLUSTER, first, first + timedelta(days=1), df)
    shutil.rmtree(raw)
    write_captures(cluster, out)
    (out / "sacct.txt").write_text(sacct_text(cluster), encoding="utf-8")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--gpus", type=int, default=256)
    ap.add_argument("--days", type=float, default=7.0)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--work", type=Path, default=Path("/tmp/gpuwaste-bench-zone"))
    args = ap.parse_args()
    spec = GeneratorSpec(seed=1, gpus=args.gpus, days=args.days, cluster=CLUSTER)
    spec = replace(spec, job_labels=False)
    out = args.work / f"g{args.gpus}-d{args.days:g}"
    base = out / "base"
    if not (out / "sacct.txt").exists():
        prepare(spec, out, base)
    os.chdir(args.work)  # DuckDB spills under the working folder
    start = datetime.fromtimestamp(spec.t0, UTC)
    end = datetime.fromtimestamp(spec.t0 + spec.duration_s, UTC)
    options = RunOptions(quiet=True, since=start, until=end)
    slurm = ClusterConfig(
        name=CLUSTER, slurm=SlurmSource(file=out / "sacct.txt", scontrol_file=out / "scontrol")
    )
    shipped = diagnose.time_zone_misfit

    def ingest(data_dir: Path, check: bool) -> tuple[float, float]:
        shutil.rmtree(data_dir, ignore_errors=True)
        shutil.copytree(base, data_dir)
        diagnose.time_zone_misfit = shipped if check else (lambda wh, cluster: None)
        try:
            settings = Settings(data_dir=data_dir, clusters=[slurm])
            wall, cpu, _ = _timed(lambda: run_configured(settings, SOURCES, options))
            return wall, cpu
        finally:
            diagnose.time_zone_misfit = shipped

    runs: dict[str, list[tuple[float, float]]] = {"with": [], "without": [], "check": []}
    wh = Warehouse(args.work / "with")
    said: object = None
    for _ in range(args.repeat):
        runs["without"].append(ingest(args.work / "without", check=False))
        runs["with"].append(ingest(args.work / "with", check=True))
        wall, cpu, said = _timed(lambda: shipped(wh, CLUSTER))
        runs["check"].append((wall, cpu))
    allocations = wh.read("job_gpus", CLUSTER).height
    files = wh.cluster_dir("gpu_samples", CLUSTER) / "date=*" / "*.parquet"
    samples = duckdb.sql(f"select count(*) from read_parquet('{files}')").fetchall()[0][0]
    med = {k: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v))
           for k, v in runs.items()}  # fmt: skip
    print(
        f"{args.gpus} GPUs x {args.days:g} days: {samples:,} GPU samples, {allocations:,} "
        f"job x GPU allocations; median of {args.repeat}, load {os.getloadavg()[0]:.1f}; "
        f"the check says: {said}"
    )
    print("| ingest slurm without the check | with it | ratio | the check alone | / ingest |")
    print("| --- | --- | --- | --- | --- |")
    for i, what in ((0, "wall s"), (1, "CPU s")):
        w, wo, c = med["with"][i], med["without"][i], med["check"][i]
        print(f"| {wo:.2f} {what} | {w:.2f} | {w / wo:.3f} | {c:.3f} | {c / wo:.3f} |")
    print({k: [round(r[0], 2) for r in v] for k, v in runs.items()})


if __name__ == "__main__":
    main()
