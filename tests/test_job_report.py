"""`gpuwaste job JOBID`: hand-computed figures (two jobs), planted truth (a generated cluster),
the strip, unknown ids (exit 2 with the closest ids), running jobs and JSON."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

from gpuwaste.act.advice import ADVICE, advise, diagnoses_of
from gpuwaste.act.job_report import IDLE, LEVELS, NO_DATA, strip
from gpuwaste.cli import app
from gpuwaste.warehouse.store import Warehouse
from tests.support.act_warehouse import PLANTED_CLUSTER, planted_warehouse, two_jobs_warehouse
from tests.support.two_jobs import T0


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return two_jobs_warehouse(tmp_path_factory.mktemp("two") / "wh")


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    return planted_warehouse(tmp_path_factory.mktemp("planted"))


def _job(data_dir: Path, *args: str) -> Any:
    env = {"COLUMNS": "250", "NO_COLOR": "1"}  # wide enough for every column of the GPU table
    return CliRunner().invoke(app, ["job", *args, "--data-dir", str(data_dir)], env=env)


def _json(data_dir: Path, job_id: str) -> dict[str, Any]:
    result = _job(data_dir, job_id, "--format", "json")
    assert result.exit_code == 0, result.output
    out: dict[str, Any] = json.loads(result.stdout)
    return out


def test_hand_computed_job(two: Path) -> None:
    # job a: GPU 0 at 70 % for 80 samples of 15 s, idle (0 %, 0 MiB) for samples 20..39:
    # U_i = 70 x 900 / 1200 = 52.5 %, one idle slot of 300 s, memory 3000 of 40960 MiB at most.
    result = _job(two, "a")
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "user ann   VC vision   state passed" in text
    assert "queueing delay 0.03 h" in text  # 2 minutes
    assert "debugging: no" in text
    row = next(line for line in text.splitlines() if line.startswith("│ h:0 "))
    # the shared renderer's one format per unit: % with one decimal, GPU hours with one
    cells = [c.strip() for c in row.strip("│").split("│")]
    assert cells == ["h:0", "52.5", "70.0", "5.5", "7.3", "0.1", "1", "no", "0.0"]
    assert "U_i %" not in text and "GPU utilization, mean (%)" in text
    assert "dashboard: http://127.0.0.1:8501/job?job=a&cluster=c" in text
    data = _json(two, "a")
    (gpu,) = data["gpus"]
    assert gpu["util_pct"] == pytest.approx(52.5)
    assert gpu["mem_max_pct"] == pytest.approx(round(100 * 3000 / 40960, 1))
    assert gpu["idle_slot_h"] == pytest.approx(round(300 / 3600, 2))
    # 60 cells of 20 s: the idle slot 10:04:45-10:09:45 covers half or more of cells 14..28
    (s,) = data["strips"]
    assert s["strip"] == LEVELS[5] * 14 + IDLE * 15 + LEVELS[0] + LEVELS[5] * 30


def test_never_used_gpu_and_its_advice(two: Path) -> None:
    data = _json(two, "b")
    (gpu,) = data["gpus"]
    assert gpu["never_used"] is True and gpu["util_pct"] == 0
    assert data["strips"][0]["strip"] == IDLE * 60
    assert data["job"]["is_debug_declared"] is True
    names = [d["name"] for d in data["diagnoses"]]
    assert names == diagnoses_of(data["job"]["diagnoses"]) and names
    assert all(d["advice"] == ADVICE[d["name"]][1] for d in data["diagnoses"])
    text = _job(two, "b").stdout
    assert "debugging: declared" in text
    # each diagnosis under the title people read (as in the digests), never its code's words
    for name, title, advice in advise(data["job"]["diagnoses"]):
        assert f"- {title}: {advice}" in text and name.replace("_", " ") not in text
    assert "bob\\x1b[2J" in text and "\x1b" not in text  # the user name, escaped


def test_unknown_job_exits_2_with_the_closest_ids(two: Path) -> None:
    result = _job(two, "aa")
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == ["gpuwaste: no job aa; closest: a, b."]
    assert result.stdout == ""
    far = _job(two, "no-such-job-at-all")
    assert far.exit_code == 2
    assert far.stderr.strip() == "gpuwaste: no job no-such-job-at-all."
    typo = _job(two, "a", "--cluster", "nosuch")  # a cluster, not a job, is unknown: listed
    assert typo.exit_code == 1
    assert str(typo.exception) == f"no analyzed jobs for cluster 'nosuch' in {two} (clusters: c)."


def test_strip_cells() -> None:
    lo = datetime(2026, 1, 1, tzinfo=UTC)
    hi = lo + timedelta(seconds=40)
    samples = pl.DataFrame(
        {"ts": [lo + timedelta(seconds=s) for s in (1, 11, 31)], "util": [100.0, 50.0, 0.0]}
    )
    slots = pl.DataFrame({"start_ts": [lo + timedelta(seconds=29)], "end_ts": [hi]})
    # cells of 10 s: 100 %, 50 %, no sample, idle slot covers 10 of 10 s
    assert strip(samples, slots, False, lo, hi, width=4) == LEVELS[7] + LEVELS[4] + NO_DATA + IDLE
    assert strip(samples, slots.clear(), True, lo, hi, width=4) == IDLE * 2 + NO_DATA + IDLE


def test_advice_covers_every_diagnosis() -> None:
    # every name job_usage.sql can write has its own advice
    sql = (Path(__file__).parent.parent / "gpuwaste/sql/analyses/job_usage.sql").read_text()
    for name in ADVICE:
        assert f"'{name}'" in sql
    assert advise("slow_start,unknown_x")[1][1] == "other low utilization"
    assert diagnoses_of(None) == [] and diagnoses_of("") == []
    # a diagnosis's evidence in parentheses is not part of its name
    busy = (
        "slow_start,looks_busy (GPU_UTIL 100 % while SM/tensor activity 1.0 % in 97 % of samples)"
    )
    assert diagnoses_of(busy) == ["slow_start", "looks_busy"]


def test_planted_never_used_gpus_and_idle_slots(planted: tuple[Path, dict[str, Any]]) -> None:
    data_dir, truth = planted
    never: dict[str, set[str]] = {}
    for r in truth["never_used"]:
        never.setdefault(r["job_id"], set()).add(f"{r['host']}/{r['gpu']}")
    slots: dict[str, int] = {}
    for r in truth["idle_slots"]:
        slots[r["job_id"]] = slots.get(r["job_id"], 0) + 1
    jobs = Warehouse(data_dir).read("job_usage", PLANTED_CLUSTER)
    checked = 0
    for job_id in sorted(never)[:4] + sorted(slots)[:4]:
        if job_id not in jobs["job_id"].to_list():
            continue
        data = _json(data_dir, job_id)
        flagged = {f"{g['host']}/{g['gpu']}" for g in data["gpus"] if g["never_used"]}
        assert flagged == never.get(job_id, set()), job_id
        assert sum(g["idle_slots"] for g in data["gpus"]) == slots.get(job_id, 0), job_id
        for g, s in zip(data["gpus"], data["strips"], strict=True):
            if g["never_used"]:
                assert set(s["strip"]) <= {IDLE, NO_DATA} and IDLE in s["strip"]
        checked += 1
    assert checked >= 4


def test_running_job_says_how_fresh(planted: tuple[Path, dict[str, Any]]) -> None:
    data_dir, _ = planted
    jobs = Warehouse(data_dir).read("job_usage", PLANTED_CLUSTER)
    running = jobs.filter(pl.col("running") & (pl.col("gpu_s") > 0))["job_id"].to_list()
    assert running
    text = _job(data_dir, running[0]).stdout
    assert "running: figures from the samples so far, up to 2026-11-01 11:59:45 UTC" in text
    assert "ended running" in text
    data = _json(data_dir, running[0])
    assert data["analyzed_up_to"].startswith("2026-11-01T11:59:45")


def test_job_without_a_warehouse_is_one_sentence(tmp_path: Path) -> None:
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "gpuwaste", "job", "1", "--data-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr == (
        f"gpuwaste: no job_usage table in {tmp_path}: run `gpuwaste analyze` first.\n"
    )
    assert T0.year == 2026
