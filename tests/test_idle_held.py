"""Idle held versus empty (#44): each idle slot's time split into memory held with no kernel
(`held_s`) and no memory held (`empty_s`), summed per GPU into job_gpu_usage's `idle_held_s` and
`idle_empty_s`, which add up to `idle_slot_s`. Hand-computed cases are in
tests/test_job_samples.py (test_idle_slots_hand_computed, against the SQL oracle); here a real
generate -> ingest -> analyze on a small generated cluster, with the memory floor raised so that
memory-holding idle GPUs enter the slots.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from gpuwaste.warehouse.store import Warehouse

# Every util-0 sample is idle whatever memory it holds: held time appears.
FLOOR_MIB = 1e9


def _gpuwaste(*args: str) -> None:
    exe = Path(sys.executable).parent / "gpuwaste"
    done = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]


def _analyzed(base: Path, floor_mib: float | None) -> Path:
    src = base / "src"
    if not src.exists():
        _gpuwaste("generate", "--out", str(src), "--seed", "11", "--gpus", "8", "--days", "1",
                  "--cluster", "gen")  # fmt: skip
    data = base / f"data-{floor_mib}"
    thresholds = "" if floor_mib is None else f"\n[thresholds]\nidle_mem_floor_mib = {floor_mib}\n"
    config = base / f"gpuwaste-{floor_mib}.toml"
    config.write_text(
        f'data_dir = "{data}"\n{thresholds}\n[[clusters]]\nname = "gen"\n\n'
        f'[clusters.openmetrics]\nfile = "{src / "metrics.om"}"\n\n'
        f'[clusters.slurm]\nfile = "{src / "sacct.txt"}"\n'
    )
    _gpuwaste("ingest", "--config", str(config), "--quiet")
    _gpuwaste("analyze", "--config", str(config), "--quiet")
    return data


@pytest.fixture(scope="module")
def warehouses(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Warehouse]:
    base = tmp_path_factory.mktemp("idle-held")
    return {
        "default": Warehouse(_analyzed(base, None)),
        "raised": Warehouse(_analyzed(base, FLOOR_MIB)),
    }


@pytest.mark.parametrize("floor", ["default", "raised"])
def test_held_and_empty_add_up_to_the_idle_slot_time(
    warehouses: dict[str, Warehouse], floor: str
) -> None:
    wh = warehouses[floor]
    gpus = wh.read("job_gpu_usage", "gen")
    assert gpus["idle_slot_s"].sum() > 0
    assert (gpus["idle_held_s"] >= 0).all() and (gpus["idle_empty_s"] >= 0).all()
    total = gpus["idle_held_s"] + gpus["idle_empty_s"]
    assert total.to_list() == pytest.approx(gpus["idle_slot_s"].to_list(), abs=1e-6)
    slots = wh.read("idle_slots", "gen")
    assert (slots["held_s"] + slots["empty_s"] - slots["duration_s"]).abs().max() < 1e-6  # type: ignore[operator]
    per_gpu = slots.group_by("job_id", "attempt", "host", "gpu").agg(pl.col("held_s").sum())
    joined = gpus.join(per_gpu, on=["job_id", "attempt", "host", "gpu"], how="left")
    # whole GPUs here (weight 1): the GPU's held time is its slots' held time
    assert joined["idle_held_s"].to_list() == pytest.approx(
        joined["held_s"].fill_null(0.0).to_list(), abs=1e-6
    )


def test_under_the_default_floor_idle_slots_hold_no_memory(
    warehouses: dict[str, Warehouse],
) -> None:
    """Idle means memory at or under `idle_mem_floor_mib` (0 MiB by default): nothing held."""
    gpus = warehouses["default"].read("job_gpu_usage", "gen")
    assert gpus["idle_held_s"].sum() == 0
    assert gpus["idle_empty_s"].sum() == pytest.approx(gpus["idle_slot_s"].sum())


def test_a_raised_floor_brings_memory_held_idle_time_into_the_slots(
    warehouses: dict[str, Warehouse],
) -> None:
    default = warehouses["default"].read("job_gpu_usage", "gen")
    raised = warehouses["raised"].read("job_gpu_usage", "gen")
    assert raised["idle_held_s"].sum() > 0
    # the empty time is the same idle time as under the default floor, or more (runs join up)
    assert raised["idle_empty_s"].sum() >= default["idle_empty_s"].sum() - 1e-6
