"""Energy per job x GPU (gpuwaste/analyses/energy.py, job_gpu_usage.sql): hand-computed cases
written into a real warehouse and analyzed: two samples, a gap, a counter reset, an idle slot,
a never-used GPU, no power at all, and a MIG-split GPU against the same GPU whole."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pytest

from gpuwaste.warehouse.store import Warehouse
from tests.test_analyses import MEM_TOTAL, at, build, gpu_row, run

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
