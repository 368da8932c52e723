"""Looks busy (#44) against the generator's planted busy loops (`gpuwaste generate --busy-loops`):
every planted busy-loop job is flagged and no other job is, by each arm:

- DCGM with SM activity (the generator writes `DCGM_FI_PROF_SM_ACTIVE` beside GPU_UTIL when it
  plants loops): the fine arm (GPU_UTIL 100 % while SM activity is 1-2 %);
- slurm-job-exporter, GPU_UTIL and power only (no SM activity written): the power arm (the
  loop draws the memory-held power, about 3.5 x the idle power the data shows).

nvidia-smi (GPU_UTIL and power only, as slurm-job-exporter) is checked at the samples the power
arm reads: its series name no job, and the scontrol captures tie jobs holding part of a host
whose minor numbers differ from their indices (all of them on this one-host cluster) to other
GPUs (tests/test_dialects_e2e.py, `misplaced`), so its jobs' flags are not the planted ones.

Each cluster is generated small (8 GPUs, half a day, a sample a minute), ingested from its
OpenMetrics file with its sacct file (and scontrol captures), and analyzed once, in one
warehouse for all.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from gpuwaste.analyses import job_samples, looks_busy
from gpuwaste.analyses.busy_power import idle_power, idle_power_variables
from gpuwaste.analyses.run import analyze
from gpuwaste.analyses.sqlfiles import define_macros, load_sql, set_variables, threshold_variables
from gpuwaste.config import ClusterConfig, OpenMetricsSource, Settings, SlurmSource, Thresholds
from gpuwaste.generate import GeneratorSpec, write_all
from gpuwaste.ingest.base import RunOptions
from gpuwaste.ingest.run import run_configured
from gpuwaste.ingest.sources import SOURCES
from gpuwaste.warehouse.catalog import connect
from gpuwaste.warehouse.store import Warehouse

ORACLE = Path(__file__).parent / "oracles" / "job_busy_evidence.sql"
LOOPS = 4
TELEMETRY = {"dcgm": "SM/tensor activity", "slurm-job-exporter": "power"}  # -> the arm's words
NVIDIA_SMI = "nvidia-smi"


@dataclass
class Cluster:
    truth: dict[str, Any]
    jobs: dict[str, dict[str, Any]]  # job_usage by job id
    data_dir: Path


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Cluster]:
    base = tmp_path_factory.mktemp("busy_generated")
    configs = []
    truth = {}
    for telemetry in [*TELEMETRY, NVIDIA_SMI]:
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
                slurm=SlurmSource(
                    file=out / "sacct.txt",
                    scontrol_file=out / "scontrol" if telemetry == NVIDIA_SMI else None,
                    gres_idx="index" if telemetry == NVIDIA_SMI else "minor",
                ),
            )
        )
    settings = Settings(data_dir=base / "data", clusters=configs)
    run_configured(settings, SOURCES, RunOptions(quiet=True))
    analyze(settings, quiet=True)
    wh = Warehouse(settings.data_dir)
    return {
        name: Cluster(
            truth[name],
            {r["job_id"]: r for r in wh.read("job_usage", name).iter_rows(named=True)},
            settings.data_dir,
        )
        for name in truth
    }


def planted_power(truth: dict[str, Any]) -> tuple[int, int, int]:
    """The idle power, the memory-held power and the most a planted loop's power exceeds it by
    (1-2 % of the load range), from the truth's power levels of the cluster's one GPU model."""
    (levels,) = truth["power"]["models"].values()
    slack = round(0.02 * (levels["loaded_w"] - levels["idle_w"]))
    return levels["idle_w"], levels["held_w"], slack


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
    power (the planted memory-held power + 1-2 % of the load range) against the idle power the
    data shows (the planted idle power, every idle sample's)."""
    c = clusters[telemetry]
    idle_w, held_w, slack = planted_power(c.truth)
    for loop in c.truth["busy_loops"]:
        text = c.jobs[loop["job_id"]]["diagnoses"]
        assert f"looks_busy (GPU_UTIL 100 % while {TELEMETRY[telemetry]} " in text, text
        assert text.endswith("in 100 % of samples)"), text
        if telemetry == "slurm-job-exporter":
            assert f"the model's idle {idle_w} W)" in text
            assert held_w <= loop["power_w_max"] <= held_w + slack
        else:
            assert loop["sm_pct_max"] <= 2


def test_nvidia_smi_gives_the_power_arm_its_planted_loops(clusters: dict[str, Cluster]) -> None:
    """As ingested: every sample of a planted loop's GPUs during the loop reads GPU_UTIL 100 at
    the planted memory-held power (+ 1-2 % of the load range) with no SM or tensor activity; no
    other sample reads GPU_UTIL >= 90 % at 4 x the idle power or under; the idle power measured
    is the planted one."""
    c = clusters[NVIDIA_SMI]
    idle_w, held_w, slack = planted_power(c.truth)
    wh = Warehouse(c.data_dir)
    samples = wh.read("gpu_samples", NVIDIA_SMI)
    jobs = {j["job_id"]: j for j in c.truth["jobs"]}
    in_loop = pl.lit(False)
    for loop in c.truth["busy_loops"]:
        start = datetime.fromisoformat(loop["start"].replace("Z", "+00:00"))
        end = datetime.fromisoformat(loop["end"].replace("Z", "+00:00"))
        for a in jobs[loop["job_id"]]["alloc"]:
            in_loop = in_loop | (
                (pl.col("host") == a["host"])
                & (pl.col("gpu") == a["gpu"])
                & pl.col("ts").is_between(start, end, closed="left")
            )
    marked = samples.with_columns(in_loop.alias("in_loop"))
    loops = marked.filter("in_loop")
    assert loops.height >= 30 * LOOPS
    assert (loops["gpu_util"] == 100).all()
    assert loops["power_w"].is_between(held_w, held_w + slack).all()
    assert loops["sm_active"].is_null().all() and loops["tensor_active"].is_null().all()
    others = marked.filter(~pl.col("in_loop"))
    assert not others.filter((pl.col("gpu_util") >= 90) & (pl.col("power_w") <= 4 * idle_w)).height
    idle = wh.read("idle_power", NVIDIA_SMI)  # one row per model, no '(all)' row
    assert idle["idle_power_w"].to_list() == [idle_w]


@pytest.mark.parametrize("telemetry", [*TELEMETRY, NVIDIA_SMI])
def test_the_pass_gives_the_oracle_evidence(clusters: dict[str, Cluster], telemetry: str) -> None:
    """looks_busy.py over the per-job pass's samples (job_samples.read and compute, as a host
    range reads them) gives, for every job of the cluster and by both arms, the rows of its test
    oracle, the SQL over gpu_samples that analyze ran before (tests/oracles/job_busy_evidence.sql)."""
    t = Thresholds()
    con = connect(clusters[telemetry].data_dir)
    jobs = con.sql("select job_id from jobs where cluster = $1", params=[telemetry]).pl()
    con.register("analyze_batch", jobs)
    as_of = con.sql("select max(ts) from gpu_samples where cluster = $1", params=[telemetry])
    as_of = as_of.fetchall()[0][0]
    set_variables(con, {**threshold_variables(t), "cluster": telemetry, "as_of": as_of})
    set_variables(con, {"host_newest": None})
    define_macros(con)
    con.execute(f"create temp table shared_spans as {load_sql('plan/shared_spans')}")
    con.execute(f"create temp table alloc_intervals as {load_sql('staging/alloc_intervals')}")
    con.execute(f"create temp table analyze_alloc as {load_sql('staging/allocations')}")
    lo, hi = con.sql(
        "select min(start_ts)::date, max(end_ts - interval 1 microsecond)::date from analyze_alloc"
    ).fetchall()[0]
    set_variables(con, {"date_lo": lo, "date_hi": hi, "host_lo": "", "host_hi": "~"})
    set_variables(con, idle_power_variables(idle_power(con, telemetry, t)))
    set_variables(con, {**threshold_variables(t), "cluster": telemetry})
    con.execute(f"create temp table device_models as {load_sql('staging/device_models')}")
    con.execute(f"create temp table alloc_models as {load_sql('staging/alloc_models')}")
    alloc = con.sql(
        "select a.*, m.idle_power_w from analyze_alloc as a left join alloc_models as m "
        "using (alloc_id) where a.gpu >= 0"
    ).pl()
    samples = job_samples.compute(con, alloc, t.idle_mem_floor_mib, t.fluctuation_window_s)
    ours = looks_busy.per_job(looks_busy.evidence(samples, alloc, t)).sort("job_id")
    theirs = con.sql(ORACLE.read_text(encoding="utf-8")).pl().sort("job_id")
    assert ours.height > 20
    arm = "fine_samples" if telemetry == "dcgm" else "power_samples"
    assert ours[arm].sum() > 1000
    assert int(ours["hollow_samples"].sum() + ours["low_power_samples"].sum()) > 100
    assert_frame_equal(ours, theirs, check_dtypes=False, check_exact=False, rel_tol=1e-9)
