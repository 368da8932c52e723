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
from gpuwaste.config import CostSettings, Settings
from tests.support.two_jobs import T0, write_two_jobs

PLANTED_CLUSTER = "g"


def two_jobs_warehouse(data_dir: Path, t0: datetime = T0) -> Path:
    write_two_jobs(data_dir, t0=t0)
    analyze(Settings(data_dir=data_dir), quiet=True)
    return data_dir


def planted_warehouse(base: Path, cost: CostSettings | None = None) -> tuple[Path, dict[str, Any]]:
    """(data_dir, truth) of an analyzed generated cluster (priced by `cost` if given)."""
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
    analyze(Settings(data_dir=data_dir, cost=cost or CostSettings()), quiet=True)
    truth = json.loads((base / "out" / "truth.json").read_text())
    return data_dir, truth


def with_low_data_job(data_dir: Path, t0: datetime = T0, cost: CostSettings | None = None) -> Path:
    """tests/support/two_jobs.py plus job c of user ann on GPU 2: idle samples for its first
    5 of 20 minutes and none after, so it is observed for 25 % of its GPU time (`low_data`);
    analyzed with the prices of `cost` if given."""
    from gpuwaste.warehouse.store import Warehouse

    write_two_jobs(data_dir, t0=t0)
    wh = Warehouse(data_dir)
    old = wh.read("gpu_samples", "c").drop("cluster", "date", strict=False)
    new = pl.DataFrame(
        {
            "host": ["h"] * 20,
            "gpu": [2] * 20,
            "ts": [t0 + timedelta(seconds=15 * k) for k in range(1, 21)],
            "util": [0.0] * 20,
            "mem_used_mib": [0.0] * 20,
            "mem_total_mib": [40960.0] * 20,
        }
    ).with_columns(pl.col("ts").dt.cast_time_unit("us").dt.replace_time_zone("UTC"))
    samples = pl.concat([old, new], how="diagonal_relaxed")
    wh.replace_window("gpu_samples", "c", t0, t0 + timedelta(hours=1), samples)
    end = t0 + timedelta(seconds=1200)
    wh.upsert(
        "jobs",
        "c",
        "t",
        pl.DataFrame(
            {"job_id": ["c"], "user": ["ann"], "vc": ["vision"], "state": ["passed"],
             "submit_ts": [t0], "start_ts": [t0], "end_ts": [end], "gpus": [1],
             "is_debug": [False]}
        ),
    )  # fmt: skip
    wh.upsert(
        "job_gpus",
        "c",
        "t",
        pl.DataFrame(
            {"job_id": ["c"], "attempt": [0], "host": ["h"], "gpu": [2], "start_ts": [t0],
             "end_ts": [end]}
        ),
    )  # fmt: skip
    analyze(Settings(data_dir=data_dir, cost=cost or CostSettings()), quiet=True)
    return data_dir
