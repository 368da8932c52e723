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


def add_job(
    data_dir: Path,
    job_id: str,
    user: str,
    vc: str,
    submit: datetime,
    start: datetime,
    end: datetime,
    gpus: list[int],
    batch: str | None = None,
) -> None:
    """A passed job of cluster c on host h's `gpus` (attempt 0, all from `start` to `end`),
    submitted at `submit` (before `start`: a job that waited), in its own batch (`batch`,
    else the job id); not analyzed."""
    from gpuwaste.warehouse.store import Warehouse

    wh = Warehouse(data_dir)
    n = len(gpus)
    wh.upsert(
        "jobs",
        "c",
        batch or job_id,
        pl.DataFrame(
            {"job_id": [job_id], "user": [user], "vc": [vc], "state": ["passed"],
             "submit_ts": [submit], "start_ts": [start], "end_ts": [end], "gpus": [n],
             "is_debug": [False]}
        ),
    )  # fmt: skip
    wh.upsert(
        "job_gpus",
        "c",
        batch or job_id,
        pl.DataFrame(
            {"job_id": [job_id] * n, "attempt": [0] * n, "host": ["h"] * n, "gpu": gpus,
             "start_ts": [start] * n, "end_ts": [end] * n}
        ),
    )  # fmt: skip


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
    add_job(data_dir, "c", "ann", "vision", t0, t0, t0 + timedelta(seconds=1200), [2], batch="t")
    analyze(Settings(data_dir=data_dir, cost=cost or CostSettings()), quiet=True)
    return data_dir
