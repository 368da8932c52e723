"""A small warehouse of two one-GPU jobs with known figures, for the analyses' and report's tests."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl

from gpuwaste.warehouse.store import Warehouse

T0 = datetime(2026, 11, 1, 10, 0, tzinfo=UTC)


def write_two_jobs(data_dir: Path, cluster: str = "c", t0: datetime = T0) -> None:
    """Jobs a (GPU 0: busy at 70 %, idle for 20 samples of 15 s) and b (GPU 1: never used,
    its user name holds an escape sequence), 20 minutes each from t0, on host h."""
    wh = Warehouse(data_dir)
    rows = []
    for k in range(1, 81):
        idle = 20 <= k < 40
        for gpu, vc_util in ((0, 70.0), (1, 0.0)):
            rows.append(
                {
                    "host": "h",
                    "gpu": gpu,
                    "ts": t0 + timedelta(seconds=15 * k),
                    "util": 0.0 if idle or gpu == 1 else vc_util,
                    "mem_used_mib": 0.0 if idle or gpu == 1 else 3000.0,
                    "mem_total_mib": 40960.0,
                }
            )
    samples = pl.DataFrame(rows).with_columns(pl.col("ts").dt.cast_time_unit("us"))
    wh.replace_window("gpu_samples", cluster, t0, t0 + timedelta(hours=1), samples)
    end = t0 + timedelta(seconds=1200)
    wh.upsert(
        "jobs",
        cluster,
        "t",
        pl.DataFrame(
            {
                "job_id": ["a", "b"],
                "user": ["ann", "bob\x1b[2J"],
                "vc": ["vision", "speech"],
                "state": ["passed", "killed"],
                "submit_ts": [t0 - timedelta(minutes=2), t0 - timedelta(days=3)],
                "start_ts": [t0, t0],
                "end_ts": [end, end],
                "gpus": [1, 1],
                "is_debug": [False, True],
            }
        ),
    )
    wh.upsert(
        "job_gpus",
        cluster,
        "t",
        pl.DataFrame(
            {
                "job_id": ["a", "b"],
                "attempt": [0, 0],
                "host": ["h", "h"],
                "gpu": [0, 1],
                "start_ts": [t0, t0],
                "end_ts": [end, end],
            }
        ),
    )
