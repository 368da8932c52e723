"""Every source records its run in `ingest_state` (its watermark and when it ran): right after a
one-off ingest, `report freshness` and the exporter's pipeline health see the source. Prometheus
is checked against a real server in tests/test_ingest_prometheus.py (`get_watermark`); the
others here, each on its own input."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from gpuwaste.analyses.freshness import freshness
from gpuwaste.cli import app
from gpuwaste.generate.cli import generate_command
from gpuwaste.ingest.sources import SOURCES
from gpuwaste.warehouse.bookkeeping import get_watermark
from gpuwaste.warehouse.store import Warehouse

TABULAR = Path(__file__).parent / "data" / "tabular"
CHECKED_ELSEWHERE = {"prometheus"}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("inputs")
    generate_command(out / "gen", seed=4, gpus=8, days=0.05, logs=True)
    for name in ("samples", "jobs"):  # the CSV export as parquet: every column as text
        pl.read_csv(TABULAR / f"{name}.csv", infer_schema=False).write_parquet(
            out / f"{name}.parquet"
        )
    return out


def _args(source: str, inputs: Path) -> list[str]:
    gen = inputs / "gen"
    return {
        "openmetrics": ["--file", str(gen / "metrics.om")],
        "slurm": ["--file", str(gen / "sacct.txt"), "--timezone", "UTC"],
        "philly": [str(gen / "philly")],
        "logs": ["--dir", str(gen / "logs")],
        "csv": ["--samples", str(TABULAR / "samples.csv"), "--jobs", str(TABULAR / "jobs.csv"),
                "--mapping", str(TABULAR / "mapping.toml")],
        "parquet": ["--samples", str(inputs / "samples.parquet"),
                    "--jobs", str(inputs / "jobs.parquet"), "--mapping", str(TABULAR / "mapping.toml")],
    }[source]  # fmt: skip


def test_every_source_is_checked() -> None:
    assert {s.name for s in SOURCES} == {
        "openmetrics",
        "slurm",
        "philly",
        "csv",
        "parquet",
        "logs",
    } | (CHECKED_ELSEWHERE)


@pytest.mark.parametrize("source", ["openmetrics", "slurm", "philly", "csv", "parquet", "logs"])
def test_a_one_off_ingest_records_its_run(inputs: Path, tmp_path: Path, source: str) -> None:
    data_dir = tmp_path / "wh"
    argv = ["ingest", "--data-dir", str(data_dir), source, *_args(source, inputs)]
    done = CliRunner().invoke(app, [*argv, "--cluster", "c", "--quiet"])
    assert done.exit_code == 0, (done.output, done.exception)
    mark = get_watermark(Warehouse(data_dir), "c", source)
    assert mark is not None
    fresh = freshness(data_dir).filter(pl.col("source") == source)
    assert fresh.height == 1 and fresh["ingested_at"][0] is not None
    assert fresh["watermark"][0] == mark
    # a second run of the same input records it again, the watermark never moved back
    again = CliRunner().invoke(app, [*argv, "--cluster", "c", "--quiet"])
    assert again.exit_code == 0, again.output
    assert get_watermark(Warehouse(data_dir), "c", source) == mark
    later = freshness(data_dir).filter(pl.col("source") == source)
    assert later.height == 1 and later["ingested_at"][0] >= fresh["ingested_at"][0]
