"""A generated cluster written straight into a warehouse (samples, jobs, allocations), without
the ingest: for tests of the analyses' reading path."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import polars as pl

from gpuwaste import generate
from gpuwaste.warehouse.host_blocks import BLOCK_HOSTS
from gpuwaste.warehouse.store import Warehouse


def write_generated(
    spec: generate.GeneratorSpec,
    root: Path,
    block_hosts: int = BLOCK_HOSTS,
    labelled: bool = False,
) -> Path:
    """The cluster of `spec` in a warehouse at `root`/wh (its sample files first written to
    `root`/samples, each day cut in blocks of `block_hosts` hosts); returns the warehouse's
    folder. `labelled`: the GPU samples also name a model (DCGM modelName: every other host's
    "NVIDIA H100", the others' "NVIDIA A100"), and each host has host samples (CPU: the mean
    utilization of its GPUs at that time; memory: their mean share of memory used)."""
    generate.write_samples_parquet(spec, root / "samples")
    cluster = generate.simulate(spec)
    wh = Warehouse(root / "wh", block_hosts)
    samples = pl.read_parquet(root / "samples" / "*" / "*.parquet")
    end = spec.start + timedelta(days=spec.days)
    if labelled:
        odd = pl.col("host").rank("dense") % 2 == 1
        samples = samples.with_columns(
            pl.when(odd)
            .then(pl.lit("NVIDIA H100"))
            .otherwise(pl.lit("NVIDIA A100"))
            .alias("gpu_model")
        )
        hosts = samples.group_by("host", "ts").agg(
            pl.col("util").mean().alias("cpu_util"),
            (pl.col("mem_used_mib") / pl.col("mem_total_mib")).mean().alias("mem_used_frac"),
        )
        wh.replace_window("host_samples", spec.cluster, spec.start, end, hosts)
    wh.replace_window("gpu_samples", spec.cluster, spec.start, end, samples)
    wh.upsert("jobs", spec.cluster, "gen", generate.jobs_frame(cluster))
    wh.upsert("job_gpus", spec.cluster, "gen", generate.job_gpus_frame(cluster))
    return root / "wh"


def six_hosts(seed: int, interval_s: int = 15) -> generate.GeneratorSpec:
    """A cluster "c" of 6 hosts (48 GPUs) over two days, a sample every `interval_s`."""
    return generate.GeneratorSpec(seed=seed, gpus=48, days=2.0, interval_s=interval_s, cluster="c")
