"""Slurm requeues planted by the generator (`generate --requeues N`, gpuwaste/generate/requeues.py):
a requeued job's runs, printed under one JobID as `sacct --duplicates` prints them, come back as
its attempts (`job_attempts`), its earlier runs as failed attempts with the scheduler's reason,
and the retries per job (`failure_retries`) count them: each against truth.json's `requeues`."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from gpuwaste import generate
from gpuwaste.analyses.run import analyze
from gpuwaste.config import ClusterConfig, Settings, SlurmSource
from gpuwaste.errors import UsageError
from gpuwaste.ingest.slurm.source import ingest_slurm
from gpuwaste.warehouse.results import ALL_MODELS, ALL_VCS
from gpuwaste.warehouse.store import Warehouse

CLUSTER = "rq"
PLANTED = 3


def _ts(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text.replace("Z", "+00:00"))


@pytest.fixture(scope="module")
def requeued(tmp_path_factory: pytest.TempPathFactory) -> tuple[Warehouse, list[dict[str, Any]]]:
    """A small generated cluster with PLANTED requeues, read from its sacct.txt alone."""
    base = tmp_path_factory.mktemp("requeues")
    spec = generate.GeneratorSpec(seed=3, gpus=16, days=1.0, cluster=CLUSTER, requeues=PLANTED)
    generate.write_all(spec, base / "out")
    truth = json.loads((base / "out" / "truth.json").read_text())["requeues"]
    settings = Settings(
        data_dir=base / "wh",
        clusters=[ClusterConfig(name=CLUSTER, slurm=SlurmSource(file=base / "out" / "sacct.txt"))],
    )
    ingest_slurm(settings, settings.clusters[0])
    analyze(settings, quiet=True)
    return Warehouse(settings.data_dir), truth


def test_the_planted_requeues_are_there(
    requeued: tuple[Warehouse, list[dict[str, Any]]],
) -> None:
    _, truth = requeued
    assert len(truth) == PLANTED
    assert all(len(job["runs"]) > 1 for job in truth)
    earlier = {run["raw_state"] for job in truth for run in job["runs"][:-1]}
    assert earlier <= {"REQUEUED", "NODE_FAIL"} and "REQUEUED" in earlier


def test_job_attempts_are_the_planted_runs(
    requeued: tuple[Warehouse, list[dict[str, Any]]],
) -> None:
    wh, truth = requeued
    want = sorted(
        (job["job_id"], run["attempt"], _ts(run["start"]), _ts(run["end"]), run["raw_state"])
        for job in truth
        for run in job["runs"]
    )
    have = sorted(
        wh.read("job_attempts", CLUSTER)
        .select("job_id", "attempt", "start_ts", "end_ts", "raw_state")
        .iter_rows()
    )
    assert have == want
    # each run holds its own hosts
    gpus = wh.read("job_gpus", CLUSTER)
    for job in truth:
        for run in job["runs"]:
            hosts = gpus.filter(
                (pl.col("job_id") == job["job_id"]) & (pl.col("attempt") == run["attempt"])
            )["host"]
            assert sorted(hosts.unique()) == run["hosts"]


def test_earlier_runs_are_failed_attempts_with_the_schedulers_reason(
    requeued: tuple[Warehouse, list[dict[str, Any]]],
) -> None:
    wh, truth = requeued
    reason = {"REQUEUED": "requeued", "NODE_FAIL": "node failure"}
    want = {
        (job["job_id"], run["attempt"]): reason[run["raw_state"]]
        for job in truth
        for run in job["runs"][:-1]
    }
    failed = wh.read("failure_attempts", CLUSTER).filter(
        pl.col("job_id").is_in([job["job_id"] for job in truth])
    )
    have = {
        (r["job_id"], r["attempt"]): r["reason"]
        for r in failed.iter_rows(named=True)
        if r["origin"] == "scheduler" and (r["job_id"], r["attempt"]) in want
    }
    assert have == want


def test_retries_per_job_count_the_requeues(
    requeued: tuple[Warehouse, list[dict[str, Any]]],
) -> None:
    """The generator's other jobs run once: the retried jobs are exactly the planted ones."""
    wh, truth = requeued
    row = (
        wh.read("failure_retries", CLUSTER)
        .filter(
            (pl.col("vc") == ALL_VCS)
            & (pl.col("gpu_model") == ALL_MODELS)
            & (pl.col("size_class") == "all")
        )
        .row(0, named=True)
    )
    assert row["jobs_retried"] == PLANTED
    assert row["retries"] == sum(len(job["runs"]) - 1 for job in truth)
    assert row["retries_max"] == max(len(job["runs"]) - 1 for job in truth)


def test_requeues_are_refused_with_vc_quotas_and_negative_counts(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--requeues -1 is not accepted"):
        generate.generate_command(tmp_path / "a", requeues=-1)
    with pytest.raises(UsageError, match="--vc-quotas --requeues 2 is not accepted: requeues"):
        generate.generate_command(tmp_path / "b", vc_quotas=True, requeues=2)


def test_without_the_flag_no_job_is_requeued() -> None:
    plain = generate.simulate(generate.GeneratorSpec(seed=3, gpus=16, days=1.0))
    assert all(j.run == 0 and j.last_run for j in plain.jobs)
    assert len({j.job_id for j in plain.jobs}) == len(plain.jobs)
