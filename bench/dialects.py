"""Benchmark: each telemetry dialect's ingest of the same cluster, against DCGM's, on both paths.

    .venv/bin/python bench/dialects.py [--gpus 32] [--days 0.5] [--repeat 3]
        [--work /tmp/gpuwaste-bench-dialects] [--no-prometheus]

One cluster (`gpuwaste generate --seed 1`) written by the generator in every variant: DCGM with
and without `hpc_job`, Jobstats with its job label and with the job gauge only
(`--no-job-labels`), slurm-job-exporter, nvidia-smi, AMD. Each is ingested into a fresh
warehouse, in this process, by the configured telemetry source (`ingest openmetrics` of its
file; `ingest prometheus` from one real Prometheus holding every variant, promtool backfill,
each variant's series under a label of its own selected by `label_filter`), then by `ingest
slurm` (the sacct file, and the scontrol captures where the series do not name the job, which
is where the ties by minor number happen). `--repeat` rounds, the variants alternated in each;
the table gives the median seconds, the ratio of the telemetry ingest to DCGM-with-`hpc_job`'s
on the same path (target: within 1.5x), that of telemetry + Slurm, and the GPU rows written
(slurm-job-exporter has no series where no job runs).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from harness.prometheus import running_prometheus, with_label

from gpuwaste.config import (
    ClusterConfig,
    OpenMetricsSource,
    PrometheusSource,
    Settings,
    SlurmSource,
)
from gpuwaste.generate import GeneratorSpec, write_all
from gpuwaste.ingest.base import RunOptions
from gpuwaste.ingest.run import run_configured
from gpuwaste.ingest.sources import SOURCES
from gpuwaste.warehouse.store import Warehouse

LABEL = "gen_variant"
VARIANTS = (  # name, telemetry, job labels
    ("dcgm", "dcgm", True),
    ("dcgm-no-job-labels", "dcgm", False),
    ("jobstats", "jobstats", True),
    ("jobstats-gauge", "jobstats", False),
    ("slurm-job-exporter", "slurm-job-exporter", True),
    ("nvidia-smi", "nvidia-smi", True),
    ("amd", "amd", True),
)
GRES_IDX = {"nvidia-smi": "index"}  # no minor numbers: IDX read as the index, as the README says
LIMIT = 1.5


def _once(cluster: ClusterConfig, options: RunOptions, work: Path) -> tuple[float, float, int]:
    """Seconds of the telemetry source, of `ingest slurm` after it, and the GPU rows written."""
    data_dir = Path(tempfile.mkdtemp(dir=work))
    telemetry_only = cluster.model_copy(update={"slurm": None})
    t0 = time.perf_counter()
    run_configured(Settings(data_dir=data_dir, clusters=[telemetry_only]), SOURCES, options)
    t1 = time.perf_counter()
    slurm_only = ClusterConfig(name=cluster.name, slurm=cluster.slurm)
    run_configured(Settings(data_dir=data_dir, clusters=[slurm_only]), SOURCES, options)
    t2 = time.perf_counter()
    rows = Warehouse(data_dir).read("gpu_samples", cluster.name).height
    shutil.rmtree(data_dir)
    return t1 - t0, t2 - t1, rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--gpus", type=int, default=32)
    ap.add_argument("--days", type=float, default=0.5)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--work", type=Path, default=Path("/tmp/gpuwaste-bench-dialects"))
    ap.add_argument("--no-prometheus", action="store_true")
    args = ap.parse_args()
    work: Path = args.work
    work.mkdir(parents=True, exist_ok=True)
    spec = GeneratorSpec(seed=1, gpus=args.gpus, days=args.days)
    outs: dict[str, Path] = {}
    for name, telemetry, labels in VARIANTS:
        out = work / f"g{args.gpus}-d{args.days}" / name
        if not (out / "truth.json").exists():
            write_all(replace(spec, telemetry=telemetry, job_labels=labels), out)
        outs[name] = out
    start = datetime.fromtimestamp(spec.t0, UTC)
    end = datetime.fromtimestamp(spec.t0 + spec.duration_s, UTC)
    options = RunOptions(quiet=True, since=start, until=end)

    def cluster(name: str, telemetry: str, **source: object) -> ClusterConfig:
        out = outs[name]
        scontrol = out / "scontrol" if (out / "scontrol").exists() else None
        gres_idx = GRES_IDX.get(name, "minor")
        slurm = SlurmSource(file=out / "sacct.txt", scontrol_file=scontrol, gres_idx=gres_idx)
        return ClusterConfig(name="bench", telemetry=telemetry, slurm=slurm, **source)  # type: ignore[arg-type]

    def measure(path: str, clusters: dict[str, ClusterConfig]) -> None:
        runs: dict[str, list[tuple[float, float, int]]] = {n: [] for n in clusters}
        for _ in range(args.repeat):
            for name, c in clusters.items():
                runs[name].append(_once(c, options, work))
        base = statistics.median(r[0] for r in runs["dcgm"])
        base_all = statistics.median(r[0] + r[1] for r in runs["dcgm"])
        print(f"\n{path}: {args.gpus} GPUs x {args.days} days, median of {args.repeat}")
        print("| dialect | telemetry s | x dcgm | + slurm s | x dcgm | gpu_samples written |")
        print("| --- | --- | --- | --- | --- | --- |")
        for name, got in runs.items():
            tel = statistics.median(r[0] for r in got)
            both = statistics.median(r[0] + r[1] for r in got)
            print(
                f"| {name} | {tel:.2f} | {tel / base:.2f} | {both:.2f} | {both / base_all:.2f} "
                f"| {got[0][2]:,} |",
                flush=True,
            )

    measure(
        "ingest openmetrics",
        {
            n: cluster(n, t, openmetrics=OpenMetricsSource(file=outs[n] / "metrics.om"))
            for n, t, _ in VARIANTS
        },
    )
    if not args.no_prometheus:
        files = [
            with_label(outs[n] / "metrics.om", work / f"{n}.om", LABEL, n) for n, _, _ in VARIANTS
        ]
        shutil.rmtree(work / "prom", ignore_errors=True)
        with running_prometheus(files, work / "prom") as server:
            measure(
                "ingest prometheus",
                {
                    n: cluster(
                        n,
                        t,
                        prometheus=PrometheusSource(
                            url=server.url, label_filter=f'{{{LABEL}="{n}"}}'
                        ),
                    )
                    for n, t, _ in VARIANTS
                },
            )
        shutil.rmtree(work / "prom")


if __name__ == "__main__":
    main()
