"""Looks busy (#44) against the generator's planted busy loops (`gpuwaste generate --busy-loops`):
every planted busy-loop job is flagged and no other job is, by each arm:

- DCGM with SM activity (the generator writes `DCGM_FI_PROF_SM_ACTIVE` beside GPU_UTIL when it
  plants loops): the fine arm (GPU_UTIL 100 % while SM activity is 1-2 %);
- slurm-job-exporter, GPU_UTIL and power only (no SM activity written): the power arm (the
  loop draws the memory-held power, about 3.5 x the idle power the data shows).

Each cluster is generated small (8 GPUs, half a day, a sample a minute), ingested from its
OpenMetrics file with its sacct file, and analyzed once, in one warehouse for both.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from gpuwaste.analyses.run import analyze
from gpuwaste.config import ClusterConfig, OpenMetricsSource, Settings, SlurmSource
from gpuwaste.generate import GeneratorSpec, write_all
from gpuwaste.generate.power import HELD_W, IDLE_W
from gpuwaste.ingest.base import RunOptions
from gpuwaste.ingest.run import run_configured
from gpuwaste.ingest.sources import SOURCES
from gpuwaste.warehouse.store import Warehouse

LOOPS = 4
TELEMETRY = {"dcgm": "SM/tensor activity", "slurm-job-exporter": "power"}  # -> the arm's words


@dataclass
class Cluster:
    truth: dict[str, Any]
    jobs: dict[str, dict[str, Any]]  # job_usage by job id


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Cluster]:
    base = tmp_path_factory.mktemp("busy_generated")
    configs = []
    truth = {}
    for telemetry in TELEMETRY:
        out = base / telemetry
        spec = GeneratorSpec(
            seed=11, gpus=8, days=0.5, interval_s=60, telemetry=telemetry, busy_loops=LOOPS
        )
        write_all(spec, out)
        truth[telemetry] = json.loads((out / "truth.json").read_text())
        configs.append(
            ClusterConfig(
                name=telemetry,
                telemetry=telemetry,
                openmetrics=OpenMetricsSource(file=out / "metrics.om"),
                slurm=SlurmSource(file=out / "sacct.txt"),
            )
        )
    settings = Settings(data_dir=base / "data", clusters=configs)
    run_configured(settings, SOURCES, RunOptions(quiet=True))
    analyze(settings, quiet=True)
    wh = Warehouse(settings.data_dir)
    return {
        name: Cluster(
            truth[name], {r["job_id"]: r for r in wh.read("job_usage", name).iter_rows(named=True)}
        )
        for name in TELEMETRY
    }


@pytest.mark.parametrize("telemetry", list(TELEMETRY))
def test_every_planted_busy_loop_and_no_other_job_looks_busy(
    clusters: dict[str, Cluster], telemetry: str
) -> None:
    c = clusters[telemetry]
    planted = {b["job_id"] for b in c.truth["busy_loops"]}
    assert len(planted) == LOOPS
    flagged = {job for job, row in c.jobs.items() if row["looks_busy"]}
    assert flagged == planted
    # every job with GPU samples was judged (by the arm its exporter allows), none left null
    # but those without a coarse sample (cancelled before they started, or too short to have one)
    sampled = {j["job_id"] for j in c.truth["jobs"] if j["n_samples"] > 0}
    unjudged = {job for job in sampled if c.jobs[job]["looks_busy"] is None}
    assert not unjudged & planted
    assert len(unjudged) <= 0.1 * len(sampled), unjudged


@pytest.mark.parametrize("telemetry", list(TELEMETRY))
def test_the_evidence_names_the_arm_that_fired(
    clusters: dict[str, Cluster], telemetry: str
) -> None:
    """DCGM: the fine arm (SM activity 1-2 %); slurm-job-exporter: the power arm, the loop's
    power (HELD_W + 1-2 % of the load range: 213-217 W) against the idle power the data shows
    (IDLE_W, the generator's idle, every idle sample's)."""
    c = clusters[telemetry]
    for loop in c.truth["busy_loops"]:
        text = c.jobs[loop["job_id"]]["diagnoses"]
        assert f"looks_busy (GPU_UTIL 100 % while {TELEMETRY[telemetry]} " in text, text
        assert text.endswith("in 100 % of samples)"), text
        if telemetry == "slurm-job-exporter":
            assert f"the model's idle {IDLE_W} W)" in text
            assert HELD_W <= loop["power_w_max"] <= HELD_W + 7
        else:
            assert loop["sm_pct_max"] <= 2
