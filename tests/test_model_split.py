"""Every summary split by the job's GPU model, with the '(all)' roll-up (docs/analyses.md#split-by-gpu-model).

A hand-computed cluster of two models (the config's host map names them) and the MIG generator's
planted truth with a second model given by the host map: each job's model, the rows of one model
against the jobs of that model, and the split rows adding up to the '(all)' row wherever a figure
is additive. The '(all)' rows equal the rows before the split: tests/test_results_unchanged.py.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from gpuwaste.analyses.registry import BY_NAME, SUMMARY_TABLES
from gpuwaste.analyses.run import analyze
from gpuwaste.analyses.sqlfiles import set_variables, threshold_variables
from gpuwaste.cli import app
from gpuwaste.config import ClusterConfig, Settings, Thresholds
from gpuwaste.generate import GeneratorSpec, write_all
from gpuwaste.warehouse.catalog import connect
from gpuwaste.warehouse.results import (
    ALL_MODELS,
    ALL_VCS,
    MIXED_MODELS,
    RESULT_TABLES,
    ROLLUP_LABELS,
    SUMMARY_GRAIN,
    UNKNOWN_MODEL,
)
from gpuwaste.warehouse.store import Warehouse

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
A100, H100 = "NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3"
MAP = {"a*": A100, "h*": H100}

# Per summary: the columns that add up over models (counts of jobs, GPU time); the others are
# shares, means or percentiles of the model's own jobs.
ADDITIVE: dict[str, tuple[str, ...]] = {
    "waste_by_vc": ("jobs", "gpu_s", "idle_slot_gpu_s", "never_used_gpu_s"),
    "never_used_by_size": ("jobs", "jobs_with_never_used"),
    "stable_phase_grid": ("stable_gpu_s", "gpu_s"),
    "spatial_summary": ("jobs",),
    "debug_jobs": ("jobs", "gpu_s", "idle_gpu_s"),
    "util_by_size_status": ("jobs", "gpu_minutes"),
    "util_minute_hist": ("gpu_minutes",),
    "util_by_spread": ("jobs",),
    "jobs_by_status": ("jobs", "gpu_s"),
    "queueing_delay": ("jobs",),
    "failure_reasons": ("trials", "jobs", "trials_1gpu", "trials_2_4gpu", "trials_gt4gpu", "gpu_h"),
    "failure_retries": ("jobs", "jobs_retried", "retries", "failed_attempts", "failed_gpu_h"),
    "queue_cause_summary": ("stretches", "cause_wait_s", "waits", "wait_s", "decisions"),
    "waste_daily": (
        "alloc_gpu_h", "busy_gpu_h", "idle_slot_gpu_h", "never_used_gpu_h", "missing_gpu_h",
        "observed_gpu_h", "util_gpu_h", "debug_gpu_h", "failed_gpu_h", "killed_gpu_h",
    ),
    "waste_by_model": ("gpu_h", "busy_gpu_h", "idle_slot_gpu_h", "never_used_gpu_h", "lost_gpu_h"),
    "energy_daily": ("gpu_h", "measured_gpu_h", "energy_kwh", "lost_energy_kwh", "facility_kwh"),
    "idle_power": (),  # a percentile of each model's own samples, no '(all)' row
    "lost_by_user": ("jobs", "gpu_h", "idle_slot_gpu_h", "never_used_gpu_h", "lost_gpu_h"),
    "waits_behind_idle": (),  # per holder's VC: queue_idle_overlap has no holder's model
}  # fmt: skip


def test_every_summary_has_the_model_grain_declared_once() -> None:
    assert set(ADDITIVE) == set(SUMMARY_TABLES)
    for name in SUMMARY_TABLES:
        assert RESULT_TABLES[name].key[: len(SUMMARY_GRAIN)] == SUMMARY_GRAIN, name
        assert "gpu_model" in RESULT_TABLES[name].columns
    assert "gpu_model" in RESULT_TABLES["job_usage"].columns


def _samples(host: str, gpu: int, util: float, mem: float) -> list[dict[str, object]]:
    return [
        {"host": host, "gpu": gpu, "ts": T0 + timedelta(minutes=k), "util": util,
         "mem_used_mib": mem, "mem_total_mib": 81920.0}
        for k in range(61)
    ]  # fmt: skip


def _two_model_cluster(data_dir: Path) -> None:
    """One hour, samples every minute. j1: a1 GPU 0 at 50 % (A100); j2: h1 GPU 0 never used
    (H100, killed); j3: a1 GPU 1 and h1 GPU 1 at 100 % ('mixed', VC w); j4: x1, no samples and
    no model anywhere ('(unknown)', failed)."""
    end = T0 + timedelta(hours=1)
    rows = [
        *_samples("a1", 0, 50.0, 4000.0),
        *_samples("h1", 0, 0.0, 0.0),
        *_samples("a1", 1, 100.0, 9000.0),
        *_samples("h1", 1, 100.0, 9000.0),
    ]
    wh = Warehouse(data_dir)
    wh.replace_window("gpu_samples", "c", T0, end + timedelta(minutes=1), pl.DataFrame(rows))
    jobs = ["j1", "j2", "j3", "j4"]
    wh.upsert("jobs", "c", "t", pl.DataFrame({
        "job_id": jobs, "user": ["ann", "bob", "ann", "cy"], "vc": ["v", "v", "w", "v"],
        "state": ["passed", "killed", "passed", "unsuccessful"],
        "submit_ts": [T0 - timedelta(minutes=m) for m in (1, 2, 3, 4)],
        "start_ts": [T0] * 4, "end_ts": [end] * 4, "gpus": [1, 1, 2, 1],
    }))  # fmt: skip
    wh.upsert("job_gpus", "c", "t", pl.DataFrame({
        "job_id": ["j1", "j2", "j3", "j3", "j4"], "attempt": [0] * 5,
        "host": ["a1", "h1", "a1", "h1", "x1"], "gpu": [0, 0, 1, 1, 0],
        "start_ts": [T0] * 5, "end_ts": [end] * 5,
    }))  # fmt: skip
    analyze(Settings(data_dir=data_dir, clusters=[ClusterConfig(name="c", gpu_models=MAP)]),
            quiet=True)  # fmt: skip


@pytest.fixture(scope="module")
def two_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data_dir = tmp_path_factory.mktemp("two-models")
    _two_model_cluster(data_dir)
    return data_dir


def _check_split_adds_up(wh: Warehouse, cluster: str) -> None:
    """In every summary, the rows of each model sum to the '(all)' row, per figure that adds up
    (and exist only where a model has jobs). spatial_summary: its shares of jobs (`pct_*`), which
    every job has; a mean a model's jobs lack (no host data) has no row of that model."""
    for name, columns in ADDITIVE.items():
        if name == "idle_power":  # per model only: no '(all)' row (tests/test_energy.py)
            continue
        frame = wh.read(name, cluster)
        if name == "spatial_summary":
            frame = frame.filter(pl.col("metric").str.starts_with("pct_"))
        assert frame.height > 0 or name in ("util_by_spread", "debug_jobs"), name
        grain = [c for c in RESULT_TABLES[name].key if c != "gpu_model"]
        split = (
            frame.filter(pl.col("gpu_model") != ALL_MODELS)
            .group_by(grain)
            .agg(pl.col(c).fill_null(0).sum() for c in columns)
        )
        total = frame.filter(pl.col("gpu_model") == ALL_MODELS).select(*grain, *columns)
        both = total.join(split, on=grain, how="full", suffix="_split", coalesce=True)
        assert both.height == total.height, name  # no split row without its '(all)' row
        for c in columns:
            got = both[f"{c}_split"].fill_null(0).to_list()
            want = both[c].fill_null(0).to_list()
            assert got == pytest.approx(want, abs=1e-6), (name, c)


def test_a_jobs_model_is_its_gpus_mixed_or_unknown(two_models: Path) -> None:
    wh = Warehouse(two_models)
    models = dict(wh.read("job_usage", "c").select("job_id", "gpu_model").iter_rows())
    assert models == {"j1": A100, "j2": H100, "j3": MIXED_MODELS, "j4": UNKNOWN_MODEL}


def test_two_models_by_hand(two_models: Path) -> None:
    wh = Warehouse(two_models)
    _check_split_adds_up(wh, "c")

    status = wh.read("jobs_by_status", "c").filter(pl.col("vc") == "(all)")
    got = {(r["gpu_model"], r["state"]): (r["jobs"], r["gpu_s"]) for r in status.to_dicts()}
    assert got == {
        (A100, "passed"): (1, 3600.0), (H100, "killed"): (1, 3600.0),
        (MIXED_MODELS, "passed"): (1, 7200.0), (UNKNOWN_MODEL, "unsuccessful"): (1, 3600.0),
        (ALL_MODELS, "passed"): (2, 10800.0), (ALL_MODELS, "killed"): (1, 3600.0),
        (ALL_MODELS, "unsuccessful"): (1, 3600.0),
    }  # fmt: skip
    shares = status.filter(pl.col("gpu_model") == A100)
    assert shares["jobs_pct"].to_list() == [100.0]  # a share of the model's own jobs

    table4 = wh.read("waste_by_vc", "c").filter((pl.col("vc") == "v") & (pl.col("kind") == "total"))
    by_model = {r["gpu_model"]: r for r in table4.to_dicts()}
    assert set(by_model) == {A100, H100, UNKNOWN_MODEL, ALL_MODELS}  # no 'mixed' job in v
    assert by_model[H100]["never_used_gpu_s"] == 3600.0
    assert by_model[H100]["never_used_pct_own"] == pytest.approx(100.0)
    assert by_model[A100]["never_used_pct_own"] == 0.0
    assert by_model[ALL_MODELS]["never_used_pct_own"] == pytest.approx(100 / 3)

    table3 = wh.read("util_by_size_status", "c").filter(
        (pl.col("vc") == "(all)") & (pl.col("size") == "all") & (pl.col("state") == "all")
    )
    util = dict(table3.select("gpu_model", "util_mean").iter_rows())
    assert util[A100] == pytest.approx(50.0) and util[H100] == 0.0
    assert util[MIXED_MODELS] == pytest.approx(100.0)
    assert util[ALL_MODELS] == pytest.approx(250 / 4)  # time-weighted over the 4 observed GPUs

    delay = wh.read("queueing_delay", "c").filter(
        (pl.col("vc") == "(all)") & (pl.col("size_class") == "all")
    )
    mean = dict(delay.select("gpu_model", "delay_mean_s").iter_rows())
    assert mean == pytest.approx(
        {A100: 60.0, H100: 120.0, MIXED_MODELS: 180.0, UNKNOWN_MODEL: 240.0, ALL_MODELS: 150.0}
    )

    daily = wh.read("waste_daily", "c").filter(pl.col("vc") == "(all)")
    alloc = dict(daily.select("gpu_model", "alloc_gpu_h").iter_rows())
    assert alloc == pytest.approx(
        {A100: 1.0, H100: 1.0, MIXED_MODELS: 2.0, UNKNOWN_MODEL: 1.0, ALL_MODELS: 5.0}
    )
    never = dict(daily.select("gpu_model", "never_used_gpu_h").iter_rows())
    assert never[H100] == pytest.approx(1.0) and never[A100] == 0.0

    # waste_by_model goes by each device's model: the mixed job's GPUs count in A100 and H100
    per_device = wh.read("waste_by_model", "c").filter(pl.col("vc") == "(all)")
    hours = dict(per_device.select("gpu_model", "gpu_h").iter_rows())
    assert hours == pytest.approx({A100: 2.0, H100: 2.0, UNKNOWN_MODEL: 1.0, ALL_MODELS: 5.0})


def _report(data_dir: Path, *args: str) -> list[dict[str, object]]:
    res = CliRunner().invoke(
        app, ["report", *args, "--data-dir", str(data_dir), "--format", "json"]
    )
    assert res.exit_code == 0, res.output
    rows: list[dict[str, object]] = json.loads(res.stdout)
    return rows


def test_the_rollup_label_is_defined_once(
    two_models: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No summary's SQL spells '(all)': each labels its roll-up rows with the variables that
    Analysis.compute sets from results.ROLLUP_LABELS. Other labels there give every summary the
    stored rows with the roll-up rows renamed, and no '(all)' left."""
    labels = {"all_vcs": "<every VC>", "all_models": "<every model>"}
    monkeypatch.setattr("gpuwaste.analyses.registry.ROLLUP_LABELS", labels)
    renamed = {"vc": (ALL_VCS, labels["all_vcs"]), "gpu_model": (ALL_MODELS, labels["all_models"])}
    assert set(ROLLUP_LABELS) == set(labels)
    wh = Warehouse(two_models)
    with connect(two_models) as con:
        set_variables(con, {**threshold_variables(Thresholds()), "cluster": "c"})
        for name in SUMMARY_TABLES:
            want = wh.read(name, "c").select(
                pl.col(c).replace(old, new) for c, (old, new) in renamed.items()
            )  # the stored rows' grain, the roll-up rows renamed
            have = BY_NAME[name].compute(con).select(SUMMARY_GRAIN)
            assert have.sort(have.columns).equals(want.sort(want.columns)), name


def test_report_prints_the_all_model_rows_one_model_or_each(two_models: Path) -> None:
    default = _report(two_models, "jobs_by_status")
    assert default and all("gpu_model" not in r for r in default)  # the study's table
    assert {(r["vc"], r["state"]) for r in default} == {
        ("(all)", "passed"), ("(all)", "killed"), ("(all)", "unsuccessful"),
        ("v", "passed"), ("v", "killed"), ("v", "unsuccessful"), ("w", "passed"),
    }  # fmt: skip
    h100 = _report(two_models, "jobs_by_status", "--model", H100, "--vc", "(all)")
    assert [(r["gpu_model"], r["state"], r["jobs"]) for r in h100] == [(H100, "killed", 1)]
    each = _report(two_models, "jobs_by_status", "--model", "each", "--vc", "(all)")
    assert {r["gpu_model"] for r in each} == {A100, H100, MIXED_MODELS, UNKNOWN_MODEL, ALL_MODELS}
    jobs = _report(two_models, "job_usage", "--model", MIXED_MODELS)
    assert [r["job_id"] for r in jobs] == ["j3"]
    since = _report(two_models, "jobs_by_status", "--model", A100, "--since", "2026-11-01")
    assert [(r["vc"], r["jobs"]) for r in since] == [("(all)", 1), ("v", 1)]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["jobs_by_status", "--model", "V100"], "no GPU model 'V100' in cluster(s) c (models: "),
        (["idle_slots", "--model", A100], "--model does not apply to idle_slots"),
        (["--by", "user", "--model", A100], "--model applies to a report NAME"),
    ],
)
def test_report_refuses_a_bad_model(two_models: Path, args: list[str], message: str) -> None:
    res = CliRunner().invoke(app, ["report", *args, "--data-dir", str(two_models)])
    assert res.exit_code != 0 and message in str(res.exception)


# --- planted truth: the MIG generator's A100 hosts, and H100 hosts named by the host map -------

SPEC = GeneratorSpec(seed=5, gpus=8, days=0.25, interval_s=15, cluster="m", mig_hosts=2)


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, object]]:
    """The generator's metrics with the modelName label taken off its whole-GPU hosts
    (gpu-node-*), whose model the cluster's host map then names H100; its MIG hosts keep
    DCGM's A100."""
    out = tmp_path_factory.mktemp("models-generated")
    write_all(SPEC, out)
    metrics = out / "metrics.om"
    metrics.write_text(
        re.sub(r'modelName="[^"]*",(Hostname="gpu-node-)', r"\1", metrics.read_text())
    )
    data = out / "wh"
    config = out / "gpuwaste.toml"
    config.write_text(
        f'data_dir = "{data}"\n\n[[clusters]]\nname = "m"\n\n'
        f'[clusters.openmetrics]\nfile = "{metrics}"\n\n[clusters.slurm]\nfile = "{out / "sacct.txt"}"\n'
        f'\n[clusters.gpu_models]\n"gpu-node-*" = "{H100}"\n'
    )
    for argv in (["ingest", "--config", str(config), "--quiet"],
                 ["analyze", "--config", str(config), "--quiet"]):  # fmt: skip
        res = CliRunner().invoke(app, argv)
        assert res.exit_code == 0, (argv, res.output)
    return data, json.loads((out / "truth.json").read_text())


def _planted_models(truth: dict[str, object]) -> dict[str, str]:
    """Each planted job's model: A100 for the MIG hosts' jobs (truth's own), H100 for the jobs
    on whole-GPU hosts (all their GPUs are there)."""
    models = {j["job_id"]: j["gpu_model"] for j in truth["mig"]["jobs"]}  # type: ignore[index]
    for j in truth["jobs"]:  # type: ignore[attr-defined]
        hosts = {a["host"] for a in j["alloc"]}
        if j["alloc"] and all(h.startswith("gpu-node-") for h in hosts):
            models.setdefault(j["job_id"], H100)
    return models


def test_planted_models_and_their_split(generated: tuple[Path, dict[str, object]]) -> None:
    data, truth = generated
    wh = Warehouse(data)
    planted = _planted_models(truth)
    usage = wh.read("job_usage", "m")
    got = dict(usage.select("job_id", "gpu_model").iter_rows())
    assert {m for m in planted.values()} == {A100, H100}
    assert {j: got.get(j) for j in planted} == planted
    assert sum(m == A100 for m in planted.values()) > 10

    _check_split_adds_up(wh, "m")
    # the A100 rows are the MIG jobs: their count, and their slice-weighted GPU time as planted
    mig_jobs = truth["mig"]["jobs"]  # type: ignore[index]
    status = wh.read("jobs_by_status", "m").filter(
        (pl.col("vc") == "(all)") & (pl.col("gpu_model") == A100)
    )
    assert status["jobs"].sum() == len({j["job_id"] for j in mig_jobs})
    assert status["gpu_s"].sum() == pytest.approx(sum(j["gpu_s"] for j in mig_jobs))
    daily = wh.read("waste_daily", "m").filter(
        (pl.col("vc") == "(all)") & (pl.col("gpu_model") == A100)
    )
    assert daily["alloc_gpu_h"].sum() * 3600 == pytest.approx(sum(j["gpu_s"] for j in mig_jobs))
    idle = sum(j["idle_slot_s"] * j["gpu_weight"] for j in mig_jobs)
    assert daily["idle_slot_gpu_h"].sum() * 3600 == pytest.approx(idle)
