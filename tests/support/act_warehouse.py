"""Warehouses for the act tests (`gpuwaste job`, `gpuwaste notify`): analyzed, with known figures.

- `two_jobs_warehouse`: tests/support/two_jobs.py (hand-computed figures), analyzed;
- `planted_warehouse`: a generated cluster (seed 3, 16 GPUs, one day) with its planted truth.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl

from gpuwaste.analyses.run import analyze
from gpuwaste.config import Settings
from tests.support.two_jobs import T0, write_two_jobs

PLANTED_CLUSTER = "g"


def two_jobs_warehouse(data_dir: Path, t0: datetime = T0) -> Path:
    write_two_jobs(data_dir, t0=t0)
    analyze(Settings(data_dir=data_dir), quiet=True)
    return data_dir


def planted_warehouse(base: Path) -> tuple[Path, dict[str, Any]]:
    """(data_dir, truth) of an analyzed generated cluster."""
    from gpuwaste import generate
    from gpuwaste.warehouse.store import Warehouse

    spec = generate.GeneratorSpec(seed=3, gpus=16, days=1.0, interval_s=15, cluster="g")
    generate.write_all(spec, base / "out")
    generate.write_samples_parquet(spec, base / "samples")
    cluster = generate.simulate(spec)
    data_dir = base / "wh"
    wh = Warehouse(data_dir)
    samples = pl.read_parquet(base / "samples" / "*" / "*.parquet")
    start = spec.start
    wh.replace_window(
        "gpu_samples", PLANTED_CLUSTER, start, start + timedelta(days=spec.days), samples
    )
    wh.upsert("jobs", PLANTED_CLUSTER, "gen", generate.jobs_frame(cluster))
    wh.upsert("job_gpus", PLANTED_CLUSTER, "gen", generate.job_gpus_frame(cluster))
    analyze(Settings(data_dir=data_dir), quiet=True)
    truth = json.loads((base / "out" / "truth.json").read_text())
    return data_dir, truth
