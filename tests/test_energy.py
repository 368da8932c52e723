"""Energy per job x GPU (gpuwaste/analyses/energy.py, job_gpu_usage.sql): hand-computed cases
written into a real warehouse and analyzed: two samples, a gap, a counter reset, an idle slot,
a never-used GPU, no power at all, and a MIG-split GPU against the same GPU whole."""

from __future__ import annotations

import csv
import io
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from streamlit.testing.v1 import AppTest
from typer.testing import CliRunner

from gpuwaste.act.notify.digest import (
    TOTALS,
    DigestContext,
    Window,
    held_sentence,
    window_figures,
)
from gpuwaste.analyses import reads
from gpuwaste.analyses.registry import BY_NAME
from gpuwaste.analyses.run import analyze
from gpuwaste.analyses.sqlfiles import set_variables, threshold_variables
from gpuwaste.analyses.waste_by import waste_by
from gpuwaste.cli import app
from gpuwaste.columns import title
from gpuwaste.config import (
    DATA_DIR_ENV,
    ClusterConfig,
    EnergyFactors,
    EnergySettings,
    NotifyConfig,
    PrometheusLabels,
    Settings,
    Thresholds,
)
from gpuwaste.dashboard import charts, queries
from gpuwaste.dashboard.filters import Filters
from gpuwaste.dialects import power_limit_w
from gpuwaste.ingest.prometheus.openmetrics_parse import parse_text
from gpuwaste.ingest.prometheus.openmetrics_source import ingest_openmetrics
from gpuwaste.ingest.prometheus.rows import gpu_rows
from gpuwaste.warehouse.catalog import connect
from gpuwaste.warehouse.readonly import read_only_connection
from gpuwaste.warehouse.store import Warehouse
from tests.support.result_digest import build_generated
from tests.test_analyses import MEM_TOTAL, at, build, gpu_row, run
from tests.test_dashboard_app import APP, TIMEOUT, _charts, _metric, _open
from tests.test_dialects import H100_IDLE, H100_LOAD

KWH = 3.6e6  # J


def kwh(joules: float) -> Any:
    """`joules` in kWh, as stored: to 6 decimals (analyses/batch.py's DECIMALS)."""
    return pytest.approx(joules / KWH, abs=1e-6)


def points(
    rows: list[tuple[float, float, float, float | None]],
    host: str = "h1",
    gpu: int = 0,
    energy: list[float] | None = None,
) -> list[dict[str, Any]]:
    """Samples (seconds after T0, util, memory MiB, power W) of one GPU, with the energy
    counter's readings (J) where given."""
    out = []
    for k, (s, u, m, p) in enumerate(rows):
        row: dict[str, Any] = {
            "host": host,
            "gpu": gpu,
            "ts": at(s),
            "util": u,
            "mem_used_mib": m,
            "mem_total_mib": MEM_TOTAL,
            "power_w": p,
        }
        if energy is not None:
            row["energy_j"] = energy[k]
        out.append(row)
    return out


def job(job_id: str, end_s: float, gpus: list[tuple[str, int]] | None = None) -> dict[str, Any]:
    return {"job_id": job_id, "start": at(0), "end": at(end_s), "gpus": gpus or [("h1", 0)]}


def analyzed(tmp: Path, samples: list[dict[str, Any]], end_s: float) -> dict[str, Any]:
    build(tmp, samples, [job("j1", end_s)])
    return gpu_row(run(tmp, sampling_interval_s=15), "j1")


def test_two_samples_each_stand_for_the_seconds_before_them(data_dir: Path) -> None:
    # 0..15 at 100 W, 15..30 at 200 W, and the end (30..45) at the last reading
    row = analyzed(data_dir, points([(15, 50, 1000, 100.0), (30, 50, 1000, 200.0)]), 45)
    assert row["energy_kwh"] == kwh(100 * 15 + 200 * 30)
    assert row["lost_energy_kwh"] == 0
    assert row["power_mean_w"] == pytest.approx(7500 / 45)


def test_a_gap_is_not_filled(data_dir: Path) -> None:
    # 30 .. 120 is longer than 3 intervals: the sample at 120 stands for nothing
    rows = [(15, 50, 1000, 100.0), (30, 50, 1000, 100.0), (120, 50, 1000, 300.0)]
    rows.append((135, 50, 1000, 300.0))
    row = analyzed(data_dir, points(rows), 150)
    assert row["energy_kwh"] == kwh(100 * 15 * 2 + 300 * 15 * 2)


def test_counter_increase_with_a_reset(data_dir: Path) -> None:
    # first sample: no earlier reading, so power x 15 s; then the counter's increases; the drop
    # from 2500 to 100 is a reset (a reboot): 100 J since it; the end after the last reading
    # at its power
    rows = [(15 * k, 50, 1000, 100.0) for k in (1, 2, 3, 4)]
    counter = [1000.0, 2500.0, 100.0, 1600.0]
    row = analyzed(data_dir, points(rows, energy=counter), 75)
    assert row["energy_kwh"] == kwh(1500 + 1500 + 100 + 1500 + 1500)


A100 = "NVIDIA A100-SXM4-80GB"  # board limit 400 W: a counter may add at most 800 W x seconds


def _counter_run(data_dir: Path, counter: list[float], power: float | None = 300.0) -> Any:
    """Four samples 15 s apart of an A100 at `power` W with the counter's readings `counter`,
    the first two in one ingest window and the last two in the next, analyzed: its row and the
    run."""
    rows = [(15 * k, 50, 1000, power) for k in (1, 2, 3, 4)]
    samples = [{**s, "gpu_model": A100} for s in points(rows, energy=counter)]
    build(data_dir, samples, [job("j1", 75)], windows=[(at(0), at(31)), (at(31), at(61))])
    t = Thresholds(sampling_interval_s=15)
    (outcome,) = analyze(Settings(data_dir=data_dir, thresholds=t), quiet=True)
    return gpu_row(Warehouse(data_dir), "j1"), outcome


def test_counter_drop_at_a_window_boundary_is_set_aside(data_dir: Path) -> None:
    # ingest checks a counter only against readings of the same window: the drop from
    # 5_004_500 J to 4_900_000 J lands between two windows. A reboot restarts the counter at 0,
    # so 4.9 MJ in 15 s (327 kW) is no reset: that sample takes power x 15 s instead
    row, outcome = _counter_run(data_dir, [5_000_000.0, 5_004_500.0, 4_900_000.0, 4_904_500.0])
    assert row["energy_kwh"] == kwh(4500 * 5)
    assert outcome.counter_set_aside == 1
    assert "1 energy-counter increase(s) set aside" in outcome.summary()


def test_counter_jump_of_a_gigajoule_is_set_aside(data_dir: Path) -> None:
    row, outcome = _counter_run(data_dir, [1000.0, 5500.0, 1e9 + 5500.0, 1e9 + 10_000.0])
    assert row["energy_kwh"] == kwh(4500 * 5)  # not 1 GJ (278 kWh)
    assert outcome.counter_set_aside == 1


def test_counter_set_aside_without_power_counts_nothing(data_dir: Path) -> None:
    # no power to fall back on: the jump's 15 s stand for nothing, not for 0 J of a reading
    row, outcome = _counter_run(data_dir, [1000.0, 5500.0, 1e9 + 5500.0, 1e9 + 10_000.0], None)
    assert row["energy_kwh"] == kwh(4500 + 4500)
    assert outcome.counter_set_aside == 1


def test_counter_reset_by_a_reboot_is_counted_from_zero(data_dir: Path) -> None:
    # a true reboot: the counter restarts near 0 (2000 J in 15 s: 133 W, under 800 W), kept
    row, outcome = _counter_run(data_dir, [5_000_000.0, 5_004_500.0, 2000.0, 6500.0])
    assert row["energy_kwh"] == kwh(4500 + 4500 + 2000 + 4500 + 4500)
    assert outcome.counter_set_aside == 0
    assert "set aside" not in outcome.summary()


def test_energy_in_an_idle_slot_is_lost(data_dir: Path) -> None:
    busy = [(15 * k, 80, 4000, 300.0) for k in range(1, 6)]
    idle = [(15 * k, 0, 0, 60.0) for k in range(6, 16)]  # 150 s idle: a slot
    back = [(15 * k, 80, 4000, 300.0) for k in range(16, 21)]
    row = analyzed(data_dir, points(busy + idle + back), 315)
    assert row["idle_slots"] == 1
    assert row["energy_kwh"] == kwh(11 * 300 * 15 + 10 * 60 * 15)
    assert row["lost_energy_kwh"] == kwh(10 * 60 * 15)


def test_never_used_gpu_loses_all_its_energy(data_dir: Path) -> None:
    rows = [(15 * k, 0, 0, 62.0) for k in range(1, 9)]
    row = analyzed(data_dir, points(rows), 135)
    assert row["never_used"]
    assert row["energy_kwh"] == kwh(9 * 62 * 15)
    assert row["lost_energy_kwh"] == row["energy_kwh"]


def test_no_power_series_is_null_not_zero(data_dir: Path) -> None:
    row = analyzed(data_dir, points([(15, 50, 1000, None), (30, 0, 0, None)]), 30)
    assert row["energy_kwh"] is None and row["lost_energy_kwh"] is None
    jobs = Warehouse(data_dir).read("job_usage", "c")
    assert jobs["energy_kwh"].to_list() == [None]


def test_job_usage_sums_its_gpus(data_dir: Path) -> None:
    a = points([(15, 50, 1000, 100.0), (30, 50, 1000, 100.0)], gpu=0)
    b = points([(15, 0, 0, 50.0), (30, 0, 0, 50.0)], gpu=1)
    build(data_dir, a + b, [job("j1", 45, [("h1", 0), ("h1", 1)])])
    jobs = run(data_dir, sampling_interval_s=15).read("job_usage", "c")
    assert jobs["energy_kwh"].item() == kwh(4500 + 2250)
    assert jobs["lost_energy_kwh"].item() == kwh(2250)  # GPU 1 never used


def _mig_warehouse(data_dir: Path, split: bool) -> Warehouse:
    """One A100 for 315 s at 300 W: whole, or as seven 1g.10gb instances each of which the
    exporter reports with the parent's power."""
    instances: list[int | None] = list(range(7)) if split else [None]
    samples, allocs = [], []
    for inst in instances:
        for k in range(1, 21):
            samples.append(
                {
                    "host": "h1",
                    "gpu": 0,
                    "gpu_instance": inst,
                    "mig_profile": "1g.10gb" if split else None,
                    "gpu_model": "NVIDIA A100-SXM4-80GB",
                    "ts": at(15 * k),
                    "util": 60.0,
                    "mem_used_mib": 2000.0,
                    "mem_total_mib": 9984.0 if split else MEM_TOTAL,
                    "power_w": 300.0,
                    "job_id": f"j{inst}",
                }
            )
        allocs.append(
            {
                "job_id": f"j{inst}",
                "attempt": 0,
                "host": "h1",
                "gpu": 0,
                "gpu_instance": inst,
                "mig_profile": "1g.10gb" if split else None,
                "start_ts": at(0),
                "end_ts": at(315),
            }
        )
    jobs = [
        {
            "job_id": a["job_id"],
            "user": "u1",
            "vc": "vc1",
            "name": "train",
            "state": "passed",
            "raw_state": "COMPLETED",
            "submit_ts": at(0),
            "start_ts": at(0),
            "end_ts": at(315),
            "gpus": 1,
            "is_debug": False,
            "source": "test",
        }
        for a in allocs
    ]
    wh = Warehouse(data_dir)
    df = pl.DataFrame(samples).with_columns(pl.col("ts").dt.cast_time_unit("us"))
    wh.replace_window("gpu_samples", "c", at(0), at(301), df)
    wh.upsert("jobs", "c", "test", pl.DataFrame(jobs))
    wh.upsert("job_gpus", "c", "test", pl.DataFrame(allocs))
    return run(data_dir, sampling_interval_s=15)


def test_split_mig_gpu_uses_the_energy_of_the_whole_one(tmp_path: Path) -> None:
    whole = _mig_warehouse(tmp_path / "whole", split=False).read("job_gpu_usage", "c")
    split = _mig_warehouse(tmp_path / "split", split=True).read("job_gpu_usage", "c")
    assert split.height == 7
    assert whole["energy_kwh"].item() == kwh(300 * 315)
    # each instance's kWh is stored to 6 decimals (batch.DECIMALS): 7 roundings at most
    assert split["energy_kwh"].sum() == pytest.approx(whole["energy_kwh"].item(), abs=7e-6)


# --- the summaries: energy_daily with the [energy] factors, idle_power -------------------------


def test_energy_daily_applies_the_clusters_factors(data_dir: Path) -> None:
    """kWh x PUE x g/kWh, the cluster's own factors over the site's; money x the price; the same
    in `report --by user`."""
    # one hour: 400 W busy, but 10 minutes idle at 100 W in the middle (an idle slot)
    rows = [(15 * k, 50, 1000, 400.0) for k in range(1, 241)]
    rows[100:140] = [(15 * k, 0, 0, 100.0) for k in range(101, 141)]
    build(data_dir, points(rows), [job("j1", 3600)])
    energy = EnergySettings(
        co2_g_per_kwh=500,
        pue=1.5,
        price_per_kwh=0.2,
        clusters={"c": EnergyFactors(co2_g_per_kwh=100, price_per_kwh=0.2)},
    )
    t = Thresholds(sampling_interval_s=15)
    analyze(Settings(data_dir=data_dir, thresholds=t, energy=energy), quiet=True)
    day = Warehouse(data_dir).read("energy_daily", "c")
    row = day.filter((pl.col("vc") == "(all)") & (pl.col("gpu_model") == "(all)")).row(
        0, named=True
    )
    kwh_all, kwh_lost = (200 * 400 + 40 * 100) * 15 / KWH, 40 * 100 * 15 / KWH  # 0.35, 0.0167
    assert row["energy_kwh"] == pytest.approx(kwh_all, abs=1e-6)
    assert row["lost_energy_kwh"] == pytest.approx(kwh_lost, abs=1e-6)
    assert row["measured_gpu_h"] == pytest.approx(1.0)
    assert row["facility_kwh"] == pytest.approx(1.5 * kwh_all, abs=1e-6)
    assert row["co2e_kg"] == pytest.approx(1.5 * kwh_all * 0.1, abs=1e-6)  # 100 g/kWh
    assert row["lost_co2e_kg"] == pytest.approx(1.5 * kwh_lost * 0.1, abs=1e-6)
    assert row["energy_cost"] == pytest.approx(1.5 * kwh_all * 0.2, abs=1e-6)
    assert row["lost_energy_cost"] == pytest.approx(1.5 * kwh_lost * 0.2, abs=1e-6)
    # `report --by user`: the period's kWh, with the same factors
    settings = Settings(data_dir=data_dir, energy=energy)
    by_user = waste_by(settings, "user").row(0, named=True)
    for column in ("energy_kwh", "lost_energy_kwh", "co2e_kg", "lost_co2e_kg"):
        assert by_user[column] == pytest.approx(row[column], abs=1e-6), column
    assert by_user["energy_cost"] == pytest.approx(row["energy_cost"], abs=1e-6)
    assert by_user["lost_energy_cost"] == pytest.approx(row["lost_energy_cost"], abs=1e-6)
    # without [energy] factors: the kWh, no CO2e and no money columns
    plain = waste_by(Settings(data_dir=data_dir), "vc").columns
    assert "energy_kwh" in plain
    assert not {"co2e_kg", "lost_co2e_kg", "energy_cost", "lost_energy_cost"} & set(plain)
    # a site with a CO2 factor and no price: CO2e, no money
    co2_only = EnergySettings(co2_g_per_kwh=500)
    columns = waste_by(Settings(data_dir=data_dir, energy=co2_only), "model").columns
    assert "co2e_kg" in columns and "energy_cost" not in columns
    assert title("energy_cost") == "Money for energy" and title("co2e_kg") == "CO2e (kg)"


def test_energy_daily_splits_a_job_across_midnight_as_waste_daily_does(data_dir: Path) -> None:
    """One hour at 400 W from 23:30 to 00:30 UTC: 0.2 kWh on each day, with half a GPU hour;
    both daily summaries read the one split (staging/allocation_days.sql)."""
    start = 14 * 3600 - 1800  # T0 is 10:00 UTC: 23:30
    rows = [(start + 15 * k, 50, 1000, 400.0) for k in range(1, 241)]
    build(data_dir, points(rows), [{"job_id": "j1", "start": at(start), "end": at(start + 3600),
                                    "gpus": [("h1", 0)]}])  # fmt: skip
    wh = run(data_dir, sampling_interval_s=15)
    everything = (pl.col("vc") == "(all)") & (pl.col("gpu_model") == "(all)")
    energy = wh.read("energy_daily", "c").filter(everything).sort("day")
    waste = wh.read("waste_daily", "c").filter(everything).sort("day")
    assert [d.isoformat() for d in energy["day"]] == ["2026-11-01", "2026-11-02"]
    assert energy["energy_kwh"].to_list() == pytest.approx([0.2, 0.2], abs=1e-6)
    assert energy["gpu_h"].to_list() == pytest.approx([0.5, 0.5])
    assert energy["day"].to_list() == waste["day"].to_list()
    assert energy["gpu_h"].to_list() == waste["alloc_gpu_h"].to_list()


def test_idle_power_of_the_real_nvidia_smi_scrapes(tmp_path: Path) -> None:
    """The H100 captures (tests/fixtures/exporter_text): idle 69.85 W, loaded 631.95 W; the
    estimator takes the idle one and leaves the loaded one out (utilization 100)."""
    settings = Settings(data_dir=tmp_path)
    for path, cluster in ((H100_IDLE, "idle"), (H100_LOAD, "load")):
        ingest_openmetrics(settings, ClusterConfig(name=cluster), path, host="ws1")
    h100 = pl.col("gpu_model") == "NVIDIA H100 80GB HBM3"
    found = {}
    with connect(tmp_path) as con:
        powers = con.sql("select cluster, power_w from gpu_samples order by 1").fetchall()
        assert powers == [("idle", pytest.approx(69.85)), ("load", pytest.approx(631.95))]
        set_variables(con, {**threshold_variables(Thresholds())})
        set_variables(con, {"gpu_model_patterns": None, "gpu_model_names": None})
        for cluster in ("idle", "load"):
            set_variables(con, {"cluster": cluster})
            found[cluster] = BY_NAME["idle_power"].compute(con).filter(h100)
    assert found["idle"]["idle_power_w"].to_list() == [pytest.approx(69.85)]
    assert found["idle"]["samples"].to_list() == [1]
    assert found["load"].is_empty()


def test_report_idle_power_lists_each_model_and_no_mixed_one(data_dir: Path) -> None:
    """Two models idle at 50 W (A100) and 70 W (H100), 10 samples each: `report idle_power`
    gives each model's row with its gpu_model (CSV too), and no row of the models mixed (whose
    10th percentile, 50 W, would be no model's idle power)."""
    samples = [
        {**p, "gpu_model": model}
        for host, model, watts in (("a1", "A100", 50.0), ("h1", "H100", 70.0))
        for p in points([(15 * k, 0, 0, watts) for k in range(1, 11)], host=host)
    ]
    build(data_dir, samples, [job("j1", 150, [("a1", 0)])])
    run(data_dir, sampling_interval_s=15)
    out = CliRunner().invoke(
        app, ["report", "idle_power", "--data-dir", str(data_dir), "--format", "csv"]
    )
    assert out.exit_code == 0, out.output
    rows = list(csv.DictReader(io.StringIO(out.stdout)))
    assert {(r["gpu_model"], float(r["idle_power_w"]), int(r["samples"])) for r in rows} == {
        ("A100", 50.0, 10),
        ("H100", 70.0, 10),
    }
    shown = CliRunner().invoke(app, ["report", "idle_power", "--data-dir", str(data_dir)])
    assert "GPU model" in shown.output and "A100" in shown.output and "H100" in shown.output


# --- ingest: the energy counter, bad power -----------------------------------------------------


def _dcgm(lines: list[tuple[str, float]]) -> Any:
    labels = (
        '{gpu="0",UUID="GPU-1",device="nvidia0",modelName="NVIDIA A100-SXM4-80GB",Hostname="n1"}'
    )
    t0 = 1793448000000
    text = []
    for k, (family, value) in enumerate(lines):
        text.append(f"{family}{labels} {value} {t0 + 15000 * (k // 3)}")
    return gpu_rows(parse_text("\n".join(text) + "\n").series, PrometheusLabels(), source="t")


def test_energy_counter_stored_reset_kept_backwards_refused() -> None:
    """DCGM's counter (mJ) -> J; a drop to at most twice the A100's 400 W x 15 s is a reboot,
    kept; a drop to a larger value ran backwards: refused with its reason."""
    # mJ: 5 MJ, +6 kJ, back to 4.9 MJ (backwards), to 100 kJ (6.7 kW over 15 s: under the
    # declared 100 kW, over the A100's 800 W: backwards), 1 J (a reboot), +6 kJ
    counter = [5_000_000_000, 5_006_000_000, 4_900_000_000, 100_000_000, 1_000, 6_001_000]
    lines = []
    for v in counter:
        lines += [("DCGM_FI_DEV_GPU_UTIL", 50), ("DCGM_FI_DEV_FB_USED", 1000)]
        lines += [("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", v)]
    rows = _dcgm(lines)
    got = rows.frame.sort("ts")["energy_j"].to_list()
    assert got == [5e6, 5.006e6, None, None, 1.0, 6001.0]
    reason = (
        "ran backwards without a reset (above 800.0 W since the last reading): "
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
    )
    assert [r.reason for r in rows.refused] == [reason, reason]


def test_bad_power_is_quarantined_never_summed() -> None:
    lines = []
    for p in (250.0, -5.0, 2e6):
        lines += [("DCGM_FI_DEV_GPU_UTIL", 50), ("DCGM_FI_DEV_FB_USED", 1000)]
        lines += [("DCGM_FI_DEV_POWER_USAGE", p)]
    rows = _dcgm(lines)
    assert rows.frame.sort("ts")["power_w"].to_list() == [250.0, None, None]
    assert sorted(r.reason for r in rows.refused) == [
        "above range: more than 100000: DCGM_FI_DEV_POWER_USAGE",
        "negative: DCGM_FI_DEV_POWER_USAGE",
    ]


# --- the reads the Job page and the exporter show ---------------------------------------------


def test_job_page_power_and_the_exporters_joules(data_dir: Path) -> None:
    """reads.job_timeline gives each GPU's power beside its utilization, charts.power draws one
    line per GPU, and reads.energy_joules the joules used and lost (the exporter's figure)."""
    a = points([(15, 50, 1000, 100.0), (30, 50, 1000, 100.0)], gpu=0)
    b = points([(15, 0, 0, 50.0), (30, 0, 0, 50.0)], gpu=1)
    build(data_dir, a + b, [job("j1", 45, [("h1", 0), ("h1", 1)])])
    run(data_dir, sampling_interval_s=15)
    with read_only_connection(data_dir) as con:
        samples = reads.job_timeline(con, "c", "j1")
        gpus = reads.job_rows(con, "job_gpu_usage", "c", "j1")
        joules = reads.energy_joules(con)
        overview = queries.job_gpu_hours(con, Filters(cluster="c")).row(0, named=True)
    # the Overview's tile: kWh lost of the kWh used, of the jobs in view
    assert overview["energy_kwh"] == kwh(6750) and overview["lost_energy_kwh"] == kwh(2250)
    assert samples.sort("gpu", "ts")["power_w"].to_list() == [100.0, 100.0, 50.0, 50.0]
    spec = charts.power(samples, gpus, "Power draw per GPU")
    drawn = spec["datasets"]["power"]
    assert sorted(drawn["gpu"].unique().to_list()) == ["h1:0", "h1:1 — NEVER USED"]
    assert drawn.height == 4
    assert joules.rows() == [("c", "used", pytest.approx(6750.0, abs=4)),
                             ("c", "lost", pytest.approx(2250.0, abs=4))]  # fmt: skip


# --- the notices ---------------------------------------------------------------------------------


def test_a_digest_says_the_energy_of_the_lost_hours_where_power_was_read(data_dir: Path) -> None:
    """digest_jobs.sql carries each job's lost kWh in the window; the digest's sentence says
    their sum, and says nothing of energy where no GPU reported power."""
    busy = [(15 * k, 80, 4000, 300.0) for k in range(1, 6)]
    idle = [(15 * k, 0, 0, 60.0) for k in range(6, 1006)]  # 1000 idle samples: 0.25 kWh lost
    build(data_dir, points(busy + idle), [job("j1", 15 * 1006)])
    run(data_dir, sampling_interval_s=15)
    window = Window(at(0), at(6 * 3600))
    with connect(data_dir) as con:
        groups = window_figures(con, "c", window, 5).groups
    totals = groups.group_by("user").agg(*TOTALS).row(0, named=True)
    ctx = DigestContext(NotifyConfig(), "c", window, min_observed_share=0.5)
    assert held_sentence(totals, ctx).endswith("The GPUs drew 0.25 kWh in the lost GPU hours.")
    unmetered = {**totals, "metered_jobs": 0, "lost_energy_kwh": 0.0}
    assert "kWh" not in held_sentence(unmetered, ctx)


def test_power_above_twice_the_models_limit_is_refused() -> None:
    """An A100-SXM4 (400 W): 700 W (a transient over its limit) is kept, 900 W is refused."""
    lines = []
    for p in (700.0, 900.0):
        lines += [("DCGM_FI_DEV_GPU_UTIL", 50), ("DCGM_FI_DEV_FB_USED", 1000)]
        lines += [("DCGM_FI_DEV_POWER_USAGE", p)]
    rows = _dcgm(lines)
    assert rows.frame.sort("ts")["power_w"].to_list() == [700.0, None]
    assert [r.reason for r in rows.refused] == [
        "above twice its model's power limit (400.0 W): DCGM_FI_DEV_POWER_USAGE"
    ]
    assert power_limit_w("NVIDIA H100 PCIe") == 350 and power_limit_w("NVIDIA L4") == 72
    assert power_limit_w("NVIDIA A100-SXM4-80GB") == 400 and power_limit_w(None) is None


# --- the energy counter through ingest, against the planted truth ------------------------------


def test_generated_dcgm_counter_with_its_reset_gives_the_planted_energy(tmp_path: Path) -> None:
    """The generator's DCGM cluster through `gpuwaste ingest` (OpenMetrics) and `analyze`: the
    energy counter (mJ, with the resets truth.json's `power` lists) is stored in J, runs
    backwards exactly there, and the per-job energy from it equals the planted truth within 1 %
    (jobs of 200 samples or more) and over the cluster; the power stays within the planted
    idle and loaded levels."""
    data = build_generated(tmp_path)
    truth = json.loads((tmp_path / "generated-src" / "truth.json").read_text())
    (levels,) = truth["power"]["models"].values()
    resets = truth["power"]["counter_resets"]
    assert len(resets) == 1
    wh = Warehouse(data)
    with connect(data) as con:
        counters = con.sql(
            "select host, gpu, ts, energy_j, power_w, energy_j < lag(energy_j) over "
            "(partition by host, gpu order by ts) as drop from gpu_samples"
        ).pl()
    assert counters["energy_j"].null_count() == 0
    drops = counters.filter(pl.col("drop"))
    # the drop shows at the reset's sample, or at the next one present (a gap may hide it)
    ((reset_ts, host, gpu),) = [(r["ts"], r["host"], r["gpu"]) for r in resets]
    at_reset = datetime.fromisoformat(reset_ts.replace("Z", "+00:00"))
    assert drops.select("host", "gpu").rows() == [(host, gpu)]
    assert drops["ts"].item() >= at_reset
    first = counters.filter((pl.col("host") == host) & (pl.col("gpu") == gpu))
    assert drops["ts"].item() == first.filter(pl.col("ts") >= at_reset)["ts"].min()
    assert counters["power_w"].min() == levels["idle_w"]
    assert counters["power_w"].max() == levels["loaded_w"]
    found = wh.read("job_gpu_usage", "gen").select("job_id", "host", "gpu", "energy_kwh")
    both = pl.DataFrame(truth["energy"]).join(found, on=["job_id", "host", "gpu"], suffix="_got")
    assert both.height > 50
    long = both.filter(pl.col("samples") >= 200)
    err = (pl.col("energy_kwh_got") - pl.col("energy_kwh")).abs()
    assert long.filter(err > 0.01 * pl.col("energy_kwh")).is_empty()
    assert both["energy_kwh_got"].sum() == pytest.approx(both["energy_kwh"].sum(), rel=0.01)


# --- the pages, as Streamlit runs them --------------------------------------------------------


def test_job_page_and_overview_show_power_and_energy(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Job page draws the power of each GPU and says the job's kWh; the Overview has the
    kWh-lost tile with its unit."""
    busy = [(15 * k, 80, 4000, 300.0) for k in range(1, 41)]
    idle = [(15 * k, 0, 0, 60.0) for k in range(41, 281)]  # an hour idle at 60 W: 0.06 kWh
    build(data_dir, points(busy + idle), [job("j1", 15 * 281)])
    run(data_dir, sampling_interval_s=15)
    monkeypatch.setenv(DATA_DIR_ENV, str(data_dir))
    at = _open(AppTest.from_file(APP, default_timeout=TIMEOUT), "job", job="j1", cluster="c")
    (power,) = [c for t, c in _charts(at).items() if t.startswith("Power draw per GPU")]
    assert sorted(power.data["power"]["power_w"].unique().to_list()) == [60.0, 300.0]
    assert any(str(c.value).startswith("Energy: 0.11") for c in at.caption), at.caption
    overview = _open(AppTest.from_file(APP, default_timeout=TIMEOUT))
    assert _metric(overview, "Energy lost (kWh)") == "0.1 kWh"


def test_job_page_says_no_power_data_where_the_energy_is_null(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Power only in samples without a utilization (the analysis reads none of them): the chart
    draws it, the job's kWh is null, and the caption says so rather than "0.000 kWh"."""
    samples = points([(15 * k, 50, 1000, None) for k in range(1, 21)])
    for k in range(1, 21):
        samples.append({**samples[0], "ts": at(15 * k - 7), "util": None, "power_w": 250.0})
    build(data_dir, samples, [job("j1", 315)])
    row = gpu_row(run(data_dir, sampling_interval_s=15), "j1")
    assert row["energy_kwh"] is None
    monkeypatch.setenv(DATA_DIR_ENV, str(data_dir))
    page = _open(AppTest.from_file(APP, default_timeout=TIMEOUT), "job", job="j1", cluster="c")
    assert [c for t, c in _charts(page).items() if t.startswith("Power draw per GPU")]
    captions = [str(c.value) for c in page.caption if str(c.value).startswith("Energy:")]
    assert captions and captions[0].startswith("Energy: no power data"), captions
    assert not any("0.000 kWh" in c for c in captions)
