"""Looks busy (#44): a job whose coarse busy metric (gpu_samples.gpu_util: DCGM GPU_UTIL) is high
while SM or tensor activity says the GPU did almost nothing, for most of the job. Hand-built
samples through a real `analyze` (warehouse rows written as ingest writes them), each job's
answer computed by hand from the thresholds (defaults: GPU_UTIL >= 90 %, SM/tensor <= 5 % or,
on samples without SM/tensor activity, power <= 4 x the model's idle power, in more than half of
the samples carrying GPU_UTIL).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from gpuwaste.act.notify.digest import DigestContext, Window, job_lines, window_figures
from gpuwaste.act.policy.replay import replay
from gpuwaste.act.policy.rule import make_rule
from gpuwaste.analyses.run import analyze
from gpuwaste.config import NotifyConfig, Settings, Thresholds
from gpuwaste.warehouse.catalog import connect
from gpuwaste.warehouse.store import Warehouse

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
MINUTES = 60
H100 = "NVIDIA H100 80GB HBM3"
Reading = tuple[float | None, ...]  # (gpu_util, sm_active, tensor_active[, power_w])


def _busy_loop(k: int) -> Reading:
    return 100.0, 1.0, 0.0  # GPU_UTIL 100, SM activity 1 %, tensor 0


# job -> (gpu, per-minute (gpu_util, sm_active, tensor_active), expected looks_busy: None where
# nothing can judge it)
JOBS = {
    # a busy loop all along
    "loop": (0, _busy_loop, True),
    # real work: GPU_UTIL 100 with SM activity 70 %
    "work": (1, lambda k: (100.0, 70.0, 20.0), False),
    # tensor-core work: SM low by this reading but tensor activity high: not hollow
    "tensor": (2, lambda k: (100.0, 3.0, 60.0), False),
    # a busy loop for 31 of 60 minutes (more than half): looks busy
    "mostly": (3, lambda k: _busy_loop(k) if k < 31 else (100.0, 70.0, 0.0), True),
    # a busy loop for exactly half the minutes: not "most"
    "half": (4, lambda k: _busy_loop(k) if k < 30 else (100.0, 70.0, 0.0), False),
    # GPU_UTIL 85 %, below busy_coarse_min_pct, with SM 1 %: not flagged
    "coarse_low": (5, lambda k: (85.0, 1.0, 0.0), False),
    # no fine metric and no power (only GPU_UTIL 100): not judged (null, not false)
    "no_fine": (6, lambda k: (100.0, None, None), None),
    # no GPU_UTIL (an exporter without the coarse metric): not judged
    "no_coarse": (7, lambda k: (None, 1.0, 0.0), None),
}


def _cluster(
    data_dir: Path,
    thresholds: Thresholds | None = None,
    jobs: Mapping[str, tuple[int, Callable[[int], Reading], bool | None]] = JOBS,
    models: Mapping[str, str] | None = None,
    extra: list[dict] | None = None,
) -> dict[str, dict]:
    """The jobs' samples (one a minute, model H100 unless `models` names another) and the
    `extra` sample rows written as ingest writes them, each job one GPU of host h1 for an hour;
    analyzed; job_usage by job."""
    rows = list(extra or [])
    for job, (gpu, reading, _) in jobs.items():
        for k in range(MINUTES):
            coarse, sm, tensor, *power = reading(k)
            rows.append({
                "host": "h1", "gpu": gpu, "gpu_model": (models or {}).get(job, H100),
                "ts": T0 + timedelta(minutes=k),
                "util": sm if sm is not None else coarse,  # the best metric present, as ingest
                "util_source": "DCGM_FI_PROF_SM_ACTIVE" if sm is not None else "DCGM_FI_DEV_GPU_UTIL",
                "gpu_util": coarse, "sm_active": sm, "tensor_active": tensor,
                "power_w": power[0] if power else None,
                "mem_used_mib": 4000.0, "mem_total_mib": 81920.0, "job_id": job,
            })  # fmt: skip
    end = T0 + timedelta(minutes=MINUTES)
    wh = Warehouse(data_dir)
    wh.replace_window("gpu_samples", "c", T0, end, pl.DataFrame(rows, infer_schema_length=None))
    n = len(jobs)
    wh.upsert("jobs", "c", "t", pl.DataFrame({
        "job_id": list(jobs), "user": ["u"] * n, "vc": ["v"] * n, "state": ["passed"] * n,
        "start_ts": [T0] * n, "end_ts": [end] * n, "gpus": [1] * n,
    }))  # fmt: skip
    wh.upsert("job_gpus", "c", "t", pl.DataFrame({
        "job_id": list(jobs), "attempt": [0] * n, "host": ["h1"] * n,
        "gpu": [g for g, _, _ in jobs.values()], "gpu_instance": [None] * n,
        "mig_profile": [None] * n, "start_ts": [T0] * n, "end_ts": [end] * n,
    }), )  # fmt: skip
    analyze(Settings(data_dir=data_dir, thresholds=thresholds or Thresholds()), quiet=True)
    return _usage(data_dir)


def _usage(data_dir: Path) -> dict[str, dict]:
    """job_usage of cluster c by job id."""
    return {
        r["job_id"]: r for r in Warehouse(data_dir).read("job_usage", "c").iter_rows(named=True)
    }


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("busy") / "data"
    _cluster(d)
    return d


@pytest.fixture(scope="module")
def jobs(data_dir: Path) -> dict[str, dict]:
    return _usage(data_dir)


def test_exactly_the_hollow_jobs_look_busy(jobs: dict[str, dict]) -> None:
    got = {job: row["looks_busy"] for job, row in jobs.items()}
    assert got == {job: want for job, (_, _, want) in JOBS.items()}


def test_the_evidence_is_in_the_diagnoses(jobs: dict[str, dict]) -> None:
    assert (
        "looks_busy (GPU_UTIL 100 % while SM/tensor activity 1.0 % in 100 % of samples)"
        in (jobs["loop"]["diagnoses"])
    )
    # 31 of 60 minutes hollow (52 %); SM/tensor mean: (31 x 1 + 29 x 70) / 60 = 34.35
    assert "in 52 % of samples" in jobs["mostly"]["diagnoses"]
    assert "SM/tensor activity 34.4 %" in jobs["mostly"]["diagnoses"]
    assert all("looks_busy" not in jobs[j]["diagnoses"] for j in JOBS if not JOBS[j][2])


def test_a_low_data_job_keeps_its_looks_busy_evidence(tmp_path: Path) -> None:
    """A busy loop with readings for 20 of its 60 minutes only is low data (observed 1/3 <
    min_observed_share 0.5): its other diagnoses are left out, but its looks-busy verdict keeps
    its evidence (never looks_busy = true with no text); a low-data job at work has none."""
    sparse: dict[str, tuple[int, Callable[[int], Reading], bool | None]] = {
        "sparse_loop": (0, lambda k: _busy_loop(k) if k < 20 else (None, None, None), True),
        "sparse_work": (1, lambda k: (100.0, 70.0, 0.0) if k < 20 else (None, None, None), False),
    }
    got = _cluster(tmp_path, jobs=sparse)
    assert all(row["low_data"] for row in got.values())
    assert got["sparse_loop"]["looks_busy"]
    assert got["sparse_loop"]["diagnoses"] == (
        "looks_busy (GPU_UTIL 100 % while SM/tensor activity 1.0 % in 100 % of samples)"
    )
    assert got["sparse_work"]["looks_busy"] is False and got["sparse_work"]["diagnoses"] == ""


def test_the_thresholds_are_parameters(tmp_path: Path) -> None:
    """GPU_UTIL >= 80 takes coarse_low in; a share of 0.4 takes half in."""
    got = _cluster(tmp_path, Thresholds(busy_coarse_min_pct=80.0, looks_busy_share=0.4))
    flagged = {job for job, row in got.items() if row["looks_busy"]}
    assert flagged == {"loop", "mostly", "half", "coarse_low"}


WINDOW = Window(T0, T0 + timedelta(days=1))


def _worst(data_dir: Path, count: bool) -> dict[str, dict]:
    con = connect(data_dir)
    try:
        figures = window_figures(con, "c", WINDOW, 20, count_looks_busy=count)
    finally:
        con.close()
    return {r["job_id"]: r for r in figures.worst.iter_rows(named=True)}


def test_notices_count_looks_busy_jobs_as_idle_only_when_asked(data_dir: Path) -> None:
    """No job here has an idle slot: without the flag none lost anything; with it, each
    looks-busy job's hour (all of it busy by utilization) is lost, and the others still none."""
    assert _worst(data_dir, count=False) == {}
    worst = _worst(data_dir, count=True)
    assert set(worst) == {"loop", "mostly"}
    for row in worst.values():
        assert row["lost_gpu_h"] == pytest.approx(1.0) == row["looks_busy_gpu_h"]
    ctx = DigestContext(NotifyConfig(), "c", WINDOW, 0.5)
    text = "\n".join(job_lines(figures_of(worst, "loop"), ctx))
    assert "1.00 of 1.00 GPU hours lost" in text
    assert (
        "1.00 h that looked busy: GPU_UTIL high while the GPU's SM and tensor activity stayed near "
        "zero or its power near idle, counted as idle (--count-looks-busy)"
    ) in text
    assert "counted as idle (--count-looks-busy)" in text
    assert "GPU looks busy but does no work" in text  # the advice for the diagnosis


def figures_of(worst: dict[str, dict], job: str) -> pl.DataFrame:
    return pl.DataFrame([worst[job]])


def test_the_replay_cancels_looks_busy_jobs_only_when_asked(data_dir: Path) -> None:
    """A 0.5 h idle rule: no job has an idle slot, so nothing is cancelled; counting looks-busy
    jobs as idle cancels exactly them at start + 0.5 h, reclaiming the other half hour with no
    work lost, and says why."""
    rule = make_rule(["0.5"], 0.0, "all", None)
    con = connect(data_dir)
    try:
        plain = replay(con, rule, jobs=True)
        counted = replay(con, rule, jobs=True, count_looks_busy=True)
    finally:
        con.close()
    assert plain.height == 0
    assert sorted(counted["job_id"]) == ["loop", "mostly"]
    for row in counted.iter_rows(named=True):
        assert row["reason"] == "looks busy (counted idle)"
        assert row["cancel_ts"] == T0 + timedelta(minutes=30)
        assert not row["wrongful"]


# --------------------------------------------------------------------------- the power arm
# The model's idle power, from an unallocated GPU's idle samples (util 0, no memory): 70 W, the
# H100's as the real nvidia-smi capture reads it; so the threshold is 4 x 70 = 280 W.
IDLE_W = 70.0


def _power(watts: float, sm: float | None = None) -> Callable[[int], Reading]:
    return lambda k: (100.0, sm, None, watts)


POWER_JOBS: dict[str, tuple[int, Callable[[int], Reading], bool | None]] = {
    "p_loop": (0, _power(279.0), True),  # just under 280 W
    "p_at": (1, _power(280.0), True),  # at the threshold: "at or under"
    "p_above": (2, _power(281.0), False),  # just over
    "p_work": (3, _power(600.0), False),  # real work
    # SM activity says it worked: the fine metric judges, the low power is no evidence
    "p_fine_wins": (4, _power(100.0, sm=70.0), False),
    # 31 of 60 minutes at 200 W, the rest at 600 W: most of the job
    "p_mostly": (5, lambda k: (100.0, None, None, 200.0 if k < 31 else 600.0), True),
    "p_half": (6, lambda k: (100.0, None, None, 200.0 if k < 30 else 600.0), False),
    # a model with no idle sample in the data: no idle power, not judged
    "p_no_idle": (7, _power(100.0), None),
    # 20 minutes hollow by SM activity, 20 by power (no SM reading), 20 of work: 40 of 60
    "p_mixed": (
        8,
        lambda k: (
            (100.0, 1.0, None, 600.0)
            if k < 20
            else (100.0, None, None, 150.0)
            if k < 40
            else (100.0, 70.0, None, 600.0)
        ),
        True,
    ),
}


def _idle_gpu() -> list[dict]:
    return [
        {"host": "h1", "gpu": 9, "gpu_model": H100, "ts": T0 + timedelta(minutes=k), "util": 0.0,
         "util_source": "DCGM_FI_DEV_GPU_UTIL", "gpu_util": 0.0, "sm_active": None,
         "tensor_active": None, "power_w": IDLE_W, "mem_used_mib": 0.0,
         "mem_total_mib": 81920.0, "job_id": None}
        for k in range(MINUTES)
    ]  # fmt: skip


def _power_cluster(data_dir: Path, thresholds: Thresholds | None = None) -> dict[str, dict]:
    models = {"p_no_idle": "NVIDIA L40S"}
    return _cluster(data_dir, thresholds, POWER_JOBS, models, _idle_gpu())


@pytest.fixture(scope="module")
def power_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("busy_power") / "data"
    _power_cluster(d)
    return d


@pytest.fixture(scope="module")
def power_jobs(power_dir: Path) -> dict[str, dict]:
    return _usage(power_dir)


def test_counted_looks_busy_hours_bring_their_energy(power_dir: Path) -> None:
    """With --count-looks-busy the lost GPU hours of a looks-busy job include its busy hours,
    and the lost energy their energy: p_loop's hour at 279 W is 0.279 kWh lost (no idle slot:
    0 kWh without the flag); a job that does not look busy loses none either way."""
    plain, counted = _worst(power_dir, count=False), _worst(power_dir, count=True)
    assert "p_loop" not in plain  # nothing lost
    assert counted["p_loop"]["lost_gpu_h"] == pytest.approx(1.0)
    assert counted["p_loop"]["lost_energy_kwh"] == pytest.approx(279 * 3600 / 3.6e6)
    # samples at minutes 0-30 at 200 W, 31-59 at 600 W, all busy by utilization; the first
    # stands for no time (the job's start), the last also for the minute after it to the end:
    # 30 min at 200 W and 30 at 600 W
    want = (30 * 200 + 30 * 600) * 60 / 3.6e6
    assert counted["p_mostly"]["lost_energy_kwh"] == pytest.approx(want)
    assert "p_work" not in counted
    # the digests' totals ("The GPUs drew X kWh in the lost GPU hours"): every looks-busy
    # job's whole energy, nothing else being lost here
    con = connect(power_dir)
    try:
        groups = window_figures(con, "c", WINDOW, 20, count_looks_busy=True).groups
    finally:
        con.close()
    jobs = Warehouse(power_dir).read("job_usage", "c").filter(pl.col("looks_busy"))
    assert groups["lost_energy_kwh"].sum() == pytest.approx(jobs["energy_kwh"].sum())


def test_the_power_arm_flags_exactly_the_jobs_near_idle_power(power_jobs: dict[str, dict]) -> None:
    got = {job: row["looks_busy"] for job, row in power_jobs.items()}
    assert got == {job: want for job, (_, _, want) in POWER_JOBS.items()}


def test_the_power_arm_names_itself_and_its_figures(power_jobs: dict[str, dict]) -> None:
    """GPU_UTIL is the only utilization of p_loop (U = 100 %): the diagnosis is there anyway."""
    loop = power_jobs["p_loop"]
    assert loop["util_mean"] == pytest.approx(100.0)
    # 279 / 70 = 3.99
    assert loop["diagnoses"] == (
        "looks_busy (GPU_UTIL 100 % while power 279 W (4.0 x the model's idle 70 W) in 100 % of "
        "samples)"
    )
    # mean power (31 x 200 + 29 x 600) / 60 = 393.3 W = 5.6 x 70; 31 of 60 samples = 52 %
    assert power_jobs["p_mostly"]["diagnoses"] == (
        "looks_busy (GPU_UTIL 100 % while power 393 W (5.6 x the model's idle 70 W) in 52 % of "
        "samples)"
    )
    # both arms: SM/tensor mean over the 40 samples with it (20 x 1 + 20 x 70) / 40 = 35.5;
    # power over the 20 samples judged by it: 150 W = 2.1 x 70; 20 of 60 samples each = 33 %
    assert power_jobs["p_mixed"]["diagnoses"] == (
        "looks_busy (GPU_UTIL 100 % while SM/tensor activity 35.5 % in 33 % of samples; "
        "GPU_UTIL 100 % while power 150 W (2.1 x the model's idle 70 W) in 33 % of samples)"
    )
    for job in ("p_above", "p_work", "p_fine_wins", "p_half", "p_no_idle"):
        assert "looks_busy" not in power_jobs[job]["diagnoses"], job


def test_the_power_threshold_is_a_parameter(tmp_path: Path) -> None:
    """At 4.1 x 70 = 287 W, p_above (281 W) is in; at 3.9 x 70 = 273 W, p_loop (279 W) is out."""
    got = _power_cluster(tmp_path / "a", Thresholds(busy_power_max_idle_x=4.1))
    assert got["p_above"]["looks_busy"] and got["p_loop"]["looks_busy"]
    got = _power_cluster(tmp_path / "b", Thresholds(busy_power_max_idle_x=3.9))
    assert not got["p_loop"]["looks_busy"] and got["p_mostly"]["looks_busy"]
