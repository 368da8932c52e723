"""Queueing causes and out-of-order starts against the generator's planted truth: a cluster whose
scheduler enforces VC quotas (`generate --vc-quotas`) and logs, from its own state between its
decisions, why each queued job could not start (gpuwaste/generate/queue_truth.py)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from gpuwaste import generate
from gpuwaste.analyses.run import analyze
from gpuwaste.config import ClusterConfig, Settings, SlurmSource
from gpuwaste.ingest.slurm.source import ingest_slurm
from gpuwaste.warehouse.store import Warehouse

CLUSTER = "g"
CAUSE_COLUMNS = ("fair_share_s", "capacity_s", "fragmentation_s", "other_s")


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, generate.GeneratorSpec]:
    """One generated cluster (its files in base/out), read by both warehouses below."""
    base = tmp_path_factory.mktemp("queue")
    spec = generate.GeneratorSpec(seed=4, gpus=32, days=1.0, cluster=CLUSTER, vc_quotas=True)
    generate.write_all(spec, base / "out")
    return base, spec


def _truth(base: Path) -> dict[str, Any]:
    queue: dict[str, Any] = json.loads((base / "out" / "truth.json").read_text())["queue"]
    return queue


def _quotas(truth: dict[str, Any]) -> dict[str, float]:
    return {vc: float(n) for vc, n in truth["vc_quotas"].items()}


@pytest.fixture(scope="module")
def planted(
    generated: tuple[Path, generate.GeneratorSpec],
) -> tuple[pl.DataFrame, dict[str, Any]]:
    base, spec = generated
    generate.write_samples_parquet(spec, base / "samples")
    cluster = generate.simulate(spec)
    truth = _truth(base)
    data_dir = base / "wh"
    wh = Warehouse(data_dir)
    samples = pl.read_parquet(base / "samples" / "*" / "*.parquet")
    wh.replace_window(
        "gpu_samples", CLUSTER, spec.start, spec.start + timedelta(days=spec.days), samples
    )
    wh.upsert("jobs", CLUSTER, "gen", generate.jobs_frame(cluster))
    wh.upsert("job_gpus", CLUSTER, "gen", generate.job_gpus_frame(cluster))
    quotas = _quotas(truth)
    settings = Settings(data_dir=data_dir, clusters=[ClusterConfig(name=CLUSTER, vc_quotas=quotas)])
    analyze(settings, quiet=True)
    return wh.read("queue_causes", CLUSTER), truth


@pytest.fixture(scope="module")
def sacct_only(
    generated: tuple[Path, generate.GeneratorSpec],
) -> tuple[pl.DataFrame, dict[str, Any]]:
    """The same cluster read from its sacct.txt alone (no telemetry: no GPU index is known,
    job_gpus has one row per host with gpu -1)."""
    base, _ = generated
    truth = _truth(base)
    slurm = SlurmSource(file=base / "out" / "sacct.txt")
    settings = Settings(
        data_dir=base / "wh-sacct",
        clusters=[ClusterConfig(name=CLUSTER, slurm=slurm, vc_quotas=_quotas(truth))],
    )
    ingest_slurm(settings, settings.clusters[0])
    wh = Warehouse(settings.data_dir)
    assert wh.read("job_gpus", CLUSTER)["gpu"].max() == -1  # nothing tied
    analyze(settings, quiet=True)
    return wh.read("queue_causes", CLUSTER), truth


def test_every_cause_is_planted(planted: tuple[pl.DataFrame, dict[str, Any]]) -> None:
    _, truth = planted
    for column in CAUSE_COLUMNS:
        assert sum(w[column] for w in truth["waits"]) > 0, column
    assert any(w["out_of_order"] for w in truth["waits"])


@pytest.mark.parametrize("read", ["planted", "sacct_only"])
def test_each_wait_by_cause_is_the_planted_one(read: str, request: pytest.FixtureRequest) -> None:
    """From telemetry and tied GPUs, and from sacct alone (the jobs' GPU counts and hosts; each
    host's capacity the most it held at once): the planted causes, second for second."""
    found, truth = request.getfixturevalue(read)
    want = pl.DataFrame(truth["waits"]).with_columns(
        pl.col(c).cast(pl.Float64) for c in CAUSE_COLUMNS
    )
    have = found.select("job_id", *CAUSE_COLUMNS, "out_of_order")
    both = want.join(have, on="job_id", how="left", suffix="_found")
    assert both.height == want.height and both["out_of_order_found"].null_count() == 0
    for c in CAUSE_COLUMNS:
        wrong = both.filter(pl.col(c) != pl.col(f"{c}_found"))
        assert wrong.height == 0, (c, wrong.head(5).to_dicts())
    wrong = both.filter(pl.col("out_of_order") != pl.col("out_of_order_found"))
    assert wrong.height == 0, wrong.head(5).to_dicts()


def test_without_the_flag_nothing_changes() -> None:
    """The default cluster is scheduled as before: no quotas, no queue truth."""
    plain = generate.simulate(generate.GeneratorSpec(seed=4, gpus=32, days=1.0))
    assert plain.queue is None
