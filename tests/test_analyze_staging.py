"""Per-job rows staged per batch, then committed: the same tables whatever the batching, nothing
left in the staging folder, and paths that SQL would misread are quoted."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from gpuwaste.analyses.batch import BatchSpec, compute_batch
from gpuwaste.analyses.registry import PER_JOB_TABLES
from gpuwaste.analyses.run import analyze
from gpuwaste.config import Settings, Thresholds
from tests.support.two_jobs import T0, write_two_jobs


def per_job(data_dir: Path) -> dict[str, pl.DataFrame]:
    return {
        name: pl.read_parquet(data_dir / "parquet" / name / "cluster=c" / "analyze.parquet")
        for name in PER_JOB_TABLES
    }


def test_a_data_dir_with_a_quote_gives_the_same_files(tmp_path: Path) -> None:
    """The same files from a data dir whose name SQL would misread and from one without, and
    from the batching options at both ends; the staging folder is gone after each run."""
    one, two = tmp_path / "plain", tmp_path / "it's quoted"
    write_two_jobs(one)
    write_two_jobs(two)
    analyze(Settings(data_dir=one), quiet=True)
    analyze(Settings(data_dir=two), quiet=True, batch_days=1, batch_hosts=1)
    a, b = per_job(one), per_job(two)
    assert a["job_usage"]["job_id"].to_list() == ["a", "b"]
    for name in PER_JOB_TABLES:
        assert a[name].equals(b[name]), name
    for d in (one, two):
        assert not any((d / "analyze_state" / "staging").glob("*/*"))


def test_compute_batch_returns_arrow_tables_of_the_batch(tmp_path: Path) -> None:
    write_two_jobs(tmp_path)
    spec = BatchSpec(
        "c", 0, ("a",), Thresholds().model_dump_json(), T0.replace(hour=12).isoformat()
    )
    tables, outcome = compute_batch(spec, tmp_path)
    assert set(tables) == set(PER_JOB_TABLES)
    assert tables["job_usage"].column("job_id").to_pylist() == ["a"]
    assert outcome.rows["job_usage"] == 1 and not outcome.failed_jobs and not outcome.error
