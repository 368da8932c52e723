"""Queueing causes and out-of-order starts against the generator's planted truth: a cluster whose
scheduler enforces VC quotas (`generate --vc-quotas`) and logs, from its own state between its
decisions, why each queued job could not start (gpuwaste/generate/queue_truth.py)."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import polars as pl
import pytest

from gpuwaste import generate
from gpuwaste.analyses.run import analyze
from gpuwaste.config import ClusterConfig, Settings
from gpuwaste.warehouse.store import Warehouse

CLUSTER = "g"
CAUSE_COLUMNS = ("fair_share_s", "capacity_s", "fragmentation_s", "other_s")


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> tuple[pl.DataFrame, dict[str, Any]]:
    base = tmp_path_factory.mktemp("queue")
    spec = generate.GeneratorSpec(seed=4, gpus=32, days=1.0, cluster=CLUSTER, vc_quotas=True)
    generate.write_all(spec, base / "out")
    generate.write_samples_parquet(spec, base / "samples")
    cluster = generate.simulate(spec)
    truth = json.loads((base / "out" / "truth.json").read_text())["queue"]
    data_dir = base / "wh"
    wh = Warehouse(data_dir)
    samples = pl.read_parquet(base / "samples" / "*" / "*.parquet")
    wh.replace_window(
        "gpu_samples", CLUSTER, spec.start, spec.start + timedelta(days=spec.days), samples
    )
    wh.upsert("jobs", CLUSTER, "gen", generate.jobs_frame(cluster))
    wh.upsert("job_gpus", CLUSTER, "gen", generate.job_gpus_frame(cluster))
    quotas = {vc: float(n) for vc, n in truth["vc_quotas"].items()}
    settings = Settings(data_dir=data_dir, clusters=[ClusterConfig(name=CLUSTER, vc_quotas=quotas)])
    analyze(settings, quiet=True)
    return wh.read("queue_causes", CLUSTER), truth


def test_every_cause_is_planted(planted: tuple[pl.DataFrame, dict[str, Any]]) -> None:
    _, truth = planted
    for column in CAUSE_COLUMNS:
        assert sum(w[column] for w in truth["waits"]) > 0, column
    assert any(w["out_of_order"] for w in truth["waits"])


def test_each_wait_by_cause_is_the_planted_one(
    planted: tuple[pl.DataFrame, dict[str, Any]],
) -> None:
    found, truth = planted
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
