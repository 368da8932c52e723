"""Helpers for the fault tests: a served synthetic cluster, a config, and warehouse snapshots.

`snapshot(data_dir)` reads every parquet file of the warehouse (temporary files excluded, as
every reader excludes them) into one frame per table, with the file's path beside each row and
the columns that record *when* a run happened (`updated_at`, `ingested_at`) dropped, sorted:
two warehouses are equal row for row when their snapshots are.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
from harness.prometheus import Synthetic

from gpuwaste.warehouse.store import TMP_MARK
from tests.conftest import REPO

VOLATILE = ("updated_at", "ingested_at")
# 2 h of data at 15 s; windows of 99 points (max_points_per_query = 100) -> 5 windows.
SPEC = Synthetic(bad_values=[(1, 2, 10, "NaN"), (1, 3, 300, "250")], gaps=[(0, 1, 100, 140)])
MAX_POINTS = 100


def bounds(spec: Synthetic = SPEC) -> tuple[datetime, datetime]:
    start = datetime.fromtimestamp(spec.start_s, UTC)
    return start, start + timedelta(seconds=spec.points * spec.interval_s)


def write_config(
    path: Path, data_dir: Path, url: str, *, retries: int = 1, timeout_s: float = 5.0
) -> Path:
    path.write_text(
        f'data_dir = "{data_dir}"\n\n[[clusters]]\nname = "c1"\n\n[clusters.prometheus]\n'
        f'url = "{url}"\nretries = {retries}\ntimeout_s = {timeout_s}\n'
        f"max_points_per_query = {MAX_POINTS}\n"
    )
    return path


def ingest_args(cfg: Path, spec: Synthetic = SPEC) -> list[str]:
    start, end = bounds(spec)
    return [
        "ingest", "prometheus", "--config", str(cfg), "--cluster", "c1", "--quiet",
        "--since", start.isoformat(), "--until", end.isoformat(),
    ]  # fmt: skip


def run_driver(
    args: list[str], env: dict[str, str] | None = None, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    """`gpuwaste <args>` through the kill driver (its hooks are inert without the env vars)."""
    return subprocess.run(
        [sys.executable, "-m", "tests.reliability.kill_driver", *args],
        cwd=REPO,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def snapshot(data_dir: Path) -> dict[str, pl.DataFrame]:
    root = data_dir / "parquet"
    out: dict[str, pl.DataFrame] = {}
    if not root.is_dir():
        return out
    for table_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        frames = []
        for f in sorted(table_dir.rglob("*.parquet")):
            if TMP_MARK in f.name:
                continue
            df = pl.read_parquet(f, hive_partitioning=False)
            df = df.drop([c for c in VOLATILE if c in df.columns])
            frames.append(df.with_columns(pl.lit(str(f.relative_to(root))).alias("_file")))
        if frames:
            df = pl.concat(frames, how="diagonal_relaxed")
            out[table_dir.name] = df.sort(df.columns, nulls_last=True)
    return out


def assert_same(got: dict[str, pl.DataFrame], want: dict[str, pl.DataFrame], what: str) -> None:
    assert sorted(got) == sorted(want), f"{what}: tables {sorted(got)} != {sorted(want)}"
    for name, df in want.items():
        other = got[name]
        assert other.height == df.height, (
            f"{what}: {name} has {other.height} rows, want {df.height}"
        )
        assert other.equals(df), f"{what}: {name} differs row for row"


def leftover_temp_files(data_dir: Path) -> list[Path]:
    return [p for p in (data_dir / "parquet").rglob(f"*{TMP_MARK}*")]
