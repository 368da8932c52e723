"""Per-job rows staged per batch, then committed: the same tables whatever the batching, nothing
left in the staging folder, and paths that SQL would misread are quoted."""

from __future__ import annotations

from pathlib import Path
from tempfile import TemporaryDirectory

import duckdb
import polars as pl

from gpuwaste.analyses.batch import BatchSpec, compute_batch
from gpuwaste.analyses.plan import write_batches
from gpuwaste.analyses.registry import PER_JOB_TABLES
from gpuwaste.analyses.run import BATCH_MAX_HOSTS, analyze
from gpuwaste.config import Settings, Thresholds
from tests.support.per_job_tables import per_job_tables
from tests.support.two_jobs import T0, write_two_jobs


def test_a_data_dir_with_a_quote_gives_the_same_files(tmp_path: Path) -> None:
    """The same files from a data dir whose name SQL would misread and from one without, and
    from the batching options at both ends; the staging folder is gone after each run."""
    one, two = tmp_path / "plain", tmp_path / "it's quoted"
    write_two_jobs(one)
    write_two_jobs(two)
    analyze(Settings(data_dir=one), quiet=True)
    analyze(Settings(data_dir=two), quiet=True, batch_days=1, batch_hosts=1)
    a, b = per_job_tables(one), per_job_tables(two)
    assert a["job_usage"]["job_id"].to_list() == ["a", "b"]
    for name in PER_JOB_TABLES:
        assert a[name].equals(b[name]), name
    for d in (one, two):
        assert not any((d / "analyze_state" / "staging").glob("*/*"))


def test_compute_batch_returns_arrow_tables_of_the_batch(tmp_path: Path) -> None:
    write_two_jobs(tmp_path)
    spec = BatchSpec(
        cluster="c", thresholds=Thresholds(), as_of=T0.replace(hour=12), job_ids=("a",)
    )
    tables, outcome = compute_batch(spec, tmp_path)
    assert set(tables) == set(PER_JOB_TABLES)
    assert tables["job_usage"].column("job_id").to_pylist() == ["a"]
    assert outcome.rows["job_usage"] == 1 and not outcome.failed_jobs and not outcome.error


def _batches(
    jobs: pl.DataFrame, batch_days: int, max_hosts: int = BATCH_MAX_HOSTS
) -> list[list[str]]:
    """The job ids of each batch, in batch order, as `sql/plan/batches.sql` splits `jobs`."""
    with TemporaryDirectory() as tmp:
        dirty, plan = Path(tmp) / "dirty.parquet", Path(tmp) / "plan.parquet"
        jobs.write_parquet(dirty)
        with duckdb.connect() as con:
            count = write_batches(con, dirty, plan, batch_days, max_hosts)
        rows = pl.read_parquet(plan)
    assert rows["batch"].is_sorted() and rows.height == jobs.height
    return [rows.filter(pl.col("batch") == i)["job_id"].to_list() for i in range(count)]


def test_batches_split_days_then_hosts_so_a_batch_does_not_grow_with_the_cluster() -> None:
    from datetime import date, timedelta

    d0 = date(2026, 1, 1)
    jobs = pl.DataFrame(
        {
            "job_id": ["a", "b", "c", "d", "e", "f", "g"],
            "first_day": [d0, d0 + timedelta(days=6), d0, d0 + timedelta(days=7), None, d0, d0],
            "first_host": ["h1", "h2", "h3", "h1", None, None, "h1"],
        }
    )

    # week 1: hosts h1, h2 then h3 (2 hosts a batch; no host: with the first); week 2; never ran
    def as_sets(batches: list[list[str]]) -> list[set[str]]:
        return [set(b) for b in batches]

    assert as_sets(_batches(jobs, 7, 2)) == [{"a", "g", "b", "f"}, {"c"}, {"d"}, {"e"}]
    assert as_sets(_batches(jobs, 7)) == [{"a", "g", "b", "c", "f"}, {"d"}, {"e"}]


def test_batches_of_a_large_cluster_hold_at_most_max_hosts_and_batch_days() -> None:
    from datetime import date, timedelta

    n = 5000
    jobs = pl.DataFrame(
        {
            "job_id": [f"j{i}" for i in range(n)],
            "first_day": [date(2026, 1, 1) + timedelta(days=(i * 7) % 30) for i in range(n)],
            "first_host": [f"node-{(i * 13) % 512:03d}" for i in range(n)],
        }
    )
    batches = _batches(jobs, 7, 64)
    assert sorted(j for b in batches for j in b) == sorted(jobs["job_id"])
    for b in batches:
        mine = jobs.filter(pl.col("job_id").is_in(b))
        assert mine["first_host"].n_unique() <= 64
        assert (mine["first_day"].max() - mine["first_day"].min()).days < 7  # type: ignore[operator]
    # 30 days in 5 windows of 7; in each, its hosts in groups of 64 (the fewest that can hold it)
    window = ((pl.col("first_day") - date(2026, 1, 1)).dt.total_days() // 7).alias("w")
    hosts = jobs.group_by(window).agg(pl.col("first_host").n_unique())["first_host"]
    assert len(batches) == sum(-(-h // 64) for h in hosts) and len(batches) > 5
