"""The per-job result tables as the last `gpuwaste analyze` of a cluster wrote them."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from gpuwaste.analyses.registry import PER_JOB_TABLES


def per_job_tables(data_dir: Path, cluster: str = "c") -> dict[str, pl.DataFrame]:
    """Every per-job result table of `cluster` in the warehouse at `data_dir`."""
    return {
        name: pl.read_parquet(
            data_dir / "parquet" / name / f"cluster={cluster}" / "analyze.parquet"
        )
        for name in PER_JOB_TABLES
    }
