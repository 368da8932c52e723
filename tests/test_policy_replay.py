"""`gpuwaste policy replay` on hand-computed cases: samples written into a real warehouse,
analyzed by `gpuwaste analyze`, then replayed through the command line.

Every job starts at T0 and is sampled once a minute (sample k at T0 + k min stands for the
minute before it). Idle = utilization 0 and memory 0; busy = 50 % with 1000 MiB.
"""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal
from typer.testing import CliRunner

from gpuwaste.act.policy.replay import open_warehouse, replay, replay_with_jobs
from gpuwaste.act.policy.rule import make_rule
from gpuwaste.cli import app
from gpuwaste.errors import GpuwasteError
from gpuwaste.warehouse.readonly import read_only_connection
from tests.conftest import REPO
from tests.test_analyses import at, build, run, series

H = 3600
BUSY = (50.0, 1000.0)
IDLE = (0.0, 0.0)
Pattern = Callable[[int], tuple[float, float] | None]  # minute k -> (util, mem) or no sample


def gpu(host: str, index: int, minutes: int, pattern: Pattern) -> list[dict[str, Any]]:
    points = []
    for k in range(1, minutes + 1):
        value = pattern(k)
        if value is not None:
            points.append((60.0 * k, *value))
    return series(host, index, points)


def busy_then_idle(k: int) -> tuple[float, float]:
    return BUSY if k <= 60 else IDLE  # busy for 1 h, then idle


def idle_then_busy(k: int) -> tuple[float, float]:
    return IDLE if k <= 90 else BUSY  # idle for 1.5 h (a dataset download), then busy


def always(value: tuple[float, float]) -> Pattern:
    return lambda k: value


def gap_then_busy(k: int) -> tuple[float, float] | None:
    if k <= 60:
        return IDLE  # idle 1 h
    return None if k < 90 else BUSY  # no samples from 1 h to 1.5 h (missing data), then busy


JOBS: list[dict[str, Any]] = [
    # A: busy 1 h then idle 2 h on its one GPU: idle slot [1 h, 3 h]
    {"job_id": "A", "vc": "x", "hours": 3, "gpus": {("h1", 0): busy_then_idle}},
    # B: both GPUs idle 1.5 h then busy 1.5 h: idle slots [0, 1.5 h]
    {"job_id": "B", "vc": "y", "hours": 3, "gpus": {("h1", 1): idle_then_busy,
                                                    ("h1", 2): idle_then_busy}},
    # C: one GPU busy throughout, the other never used: never idle as a job
    {"job_id": "C", "vc": "y", "hours": 2, "gpus": {("h1", 3): always(BUSY),
                                                    ("h1", 4): always(IDLE)}},
    # D: GPU 5 idle [0, 2 h] then busy; GPU 6 busy 0.5 h then idle [0.5 h, 3 h]:
    #    the job is idle over [0.5 h, 2 h]
    {"job_id": "D", "vc": "x", "hours": 3, "gpus": {
        ("h1", 5): lambda k: IDLE if k <= 120 else BUSY,
        ("h1", 6): lambda k: BUSY if k <= 30 else IDLE}},
    # E: a declared debugging (interactive) job, busy for its 3 h
    {"job_id": "E", "vc": "x", "hours": 3, "is_debug": True, "gpus": {("h1", 7): always(BUSY)}},
    # F: idle 1 h, no data 1 h -> 1.5 h, busy 1.5 h -> 3 h
    {"job_id": "F", "vc": "y", "hours": 3, "gpus": {("h2", 0): gap_then_busy}},
    # G: idle 40 min, busy 20 min, idle 2 h: two long idle slots on one GPU (the general sweep)
    {"job_id": "G", "vc": "z", "hours": 3, "gpus": {
        ("h2", 3): lambda k: IDLE if k <= 40 or k > 60 else BUSY}},
    # H: two attempts, GPU 1 for the first hour, GPU 2 for the second, both idle: the job is idle
    #    for 2 h across the attempts (the general sweep)
    {"job_id": "H", "vc": "z", "hours": 2, "gpus": {
        ("h2", 1): lambda k: IDLE if k <= 60 else None,
        ("h2", 2): lambda k: IDLE if k > 60 else None},
     "attempts": [(0, "h2", 1, 0, 1), (1, "h2", 2, 1, 2)]},
]  # fmt: skip


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data_dir = tmp_path_factory.mktemp("policy") / "warehouse"
    data_dir.mkdir()
    samples, jobs = [], []
    for j in JOBS:
        for (host, index), pattern in j["gpus"].items():
            samples += gpu(host, index, 60 * j["hours"], pattern)
        jobs.append(
            {
                "job_id": j["job_id"],
                "vc": j["vc"],
                "is_debug": j.get("is_debug", False),
                "start": at(0),
                "end": at(j["hours"] * H),
                "gpus": list(j["gpus"]),
            }
        )
    wh = build(data_dir, samples, jobs)
    for j in JOBS:  # allocations other than one window for all the job's GPUs
        attempts = [
            {"job_id": j["job_id"], "attempt": a, "host": h, "gpu": g, "start_ts": at(s * H),
             "end_ts": at(e * H)}
            for a, h, g, s, e in j.get("attempts", [])
        ]  # fmt: skip
        if attempts:
            rows = pl.DataFrame(attempts)
            wh.replace_rows_where("job_gpus", "c", "test", pl.col("job_id") == j["job_id"], rows)
    run(data_dir, sampling_interval_s=60)
    return data_dir


def replay_json(data_dir: Path, *args: str) -> list[dict[str, Any]]:
    out = CliRunner().invoke(
        app, ["policy", "replay", "--data-dir", str(data_dir), "--format", "json", *args]
    )
    assert out.exit_code == 0, out.output
    rows: list[dict[str, Any]] = json.loads(out.stdout)
    return rows


def hits(data_dir: Path, *args: str) -> dict[tuple[float, str], dict[str, Any]]:
    rows = replay_json(data_dir, "--jobs", *args)
    return {(r["idle_hours"], r["job_id"]): r for r in rows}


def test_hand_computed_hits(warehouse: Path) -> None:
    got = hits(warehouse, "--idle-hours", "0.5,1,2")
    expected = {
        # (H, job): (cancel after start in h, reclaimed GPU h, work lost GPU h)
        (0.5, "A"): (1.5, 1.5, 0.0),  # idle from 1 h: cancel at 1.5 h, 1.5 h of 1 GPU back
        (1.0, "A"): (2.0, 1.0, 0.0),
        (0.5, "B"): (0.5, 5.0, 3.0),  # cancel at 0.5 h, 2 GPUs busy 1.5 h after: wrongful
        (1.0, "B"): (1.0, 4.0, 3.0),
        (0.5, "D"): (1.0, 4.0, 1.0),  # idle as a job from 0.5 h; GPU 5 busy from 2 h to 3 h
        (1.0, "D"): (1.5, 3.0, 1.0),
        (0.5, "F"): (0.5, 2.5, 1.5),  # after 0.5 h: 0.5 h idle, 0.5 h no data, 1.5 h busy
        (1.0, "F"): (1.0, 2.0, 1.5),
        (0.5, "G"): (0.5, 2.5, 1 / 3),  # in the first idle slot; busy 40 -> 60 min after
        (1.0, "G"): (2.0, 1.0, 0.0),  # the first slot is too short: 1 h into the second
        (0.5, "H"): (0.5, 1.5, 0.0),  # half an hour of GPU 1 and the hour of GPU 2
        (1.0, "H"): (1.0, 1.0, 0.0),  # cancelled as GPU 1's attempt ends: GPU 2's hour
    }
    assert set(got) == set(expected)  # C (one GPU busy) and E (busy) are never idle as jobs;
    # A's and B's stretches are shorter than 2 h
    for key, (cancel_h, reclaimed, lost) in expected.items():
        r = got[key]
        assert r["cancel_ts"] == at(cancel_h * H).isoformat(), key
        assert r["reason"] == "idle"
        assert r["reclaimed_gpu_h"] == pytest.approx(reclaimed), key
        assert r["work_lost_gpu_h"] == pytest.approx(lost), key
        assert r["wrongful"] is (lost > 0), key
    # F's missing half hour after the cancel point could have been work: the upper bound has it
    assert got[(0.5, "F")]["work_lost_max_gpu_h"] == pytest.approx(2.0)
    assert got[(0.5, "B")]["work_lost_max_gpu_h"] == pytest.approx(3.0)


def test_per_vc_and_total(warehouse: Path) -> None:
    rows = replay_json(warehouse, "--idle-hours", "1")
    by_vc = {r["vc"]: r for r in rows}
    assert [r["vc"] for r in rows] == ["(all)", "x", "y", "z"]  # the total first
    x, y, z, total = by_vc["x"], by_vc["y"], by_vc["z"], by_vc["(all)"]
    # x: A (3 GPU h), D (6), E (3); y: B (6), C (4), F (3); z: G (3), H (2)
    assert (x["jobs"], x["gpu_h"], y["jobs"], y["gpu_h"]) == (3, 12.0, 3, 13.0)
    assert (x["jobs_hit"], x["wrongful_hits"]) == (2, 1)
    assert x["reclaimed_gpu_h"] == pytest.approx(1.0 + 3.0)
    assert x["work_lost_gpu_h"] == pytest.approx(1.0)
    assert (y["jobs_hit"], y["wrongful_hits"]) == (2, 2)
    assert y["reclaimed_gpu_h"] == pytest.approx(4.0 + 2.0)
    assert y["work_lost_gpu_h"] == pytest.approx(3.0 + 1.5)
    assert y["work_lost_max_gpu_h"] == pytest.approx(3.0 + 2.0)
    assert (z["jobs"], z["gpu_h"], z["jobs_hit"], z["wrongful_hits"]) == (2, 5.0, 2, 0)
    assert z["reclaimed_gpu_h"] == pytest.approx(1.0 + 1.0)
    assert total["jobs"] == 8 and total["jobs_hit"] == 6 and total["wrongful_hits"] == 3
    assert total["reclaimed_gpu_h"] == pytest.approx(12.0)
    assert total["reclaimed_pct"] == pytest.approx(100 * 12.0 / 30.0)


def test_grace_delays_the_cancel(warehouse: Path) -> None:
    got = hits(warehouse, "--idle-hours", "0.5", "--grace-minutes", "60")
    assert got[(0.5, "B")]["cancel_ts"] == at(1 * H).isoformat()  # not before start + 1 h
    assert got[(0.5, "A")]["cancel_ts"] == at(1.5 * H).isoformat()  # already past the grace
    # grace 100 min: B's idle stretch ends at 1.5 h, before the grace ends: no cancel
    assert (0.5, "B") not in hits(warehouse, "--idle-hours", "0.5", "--grace-minutes", "100")


def test_only_and_the_interactive_time_limit(warehouse: Path) -> None:
    assert replay_json(warehouse, "--idle-hours", "1", "--only", "interactive")[0]["jobs"] == 1
    assert hits(warehouse, "--idle-hours", "1", "--only", "debugging") == {}
    got = hits(
        warehouse, "--idle-hours", "1", "--only", "interactive", "--max-interactive-hours", "1"
    )
    assert list(got) == [(1.0, "E")]
    e = got[(1.0, "E")]
    assert e["reason"] == "time limit" and e["cancel_ts"] == at(H).isoformat()
    assert e["reclaimed_gpu_h"] == e["work_lost_gpu_h"] == pytest.approx(2) and e["wrongful"]
    # a limit longer than the job: no cancel
    assert hits(warehouse, "--idle-hours", "1", "--max-interactive-hours", "3")[(1.0, "A")]
    assert (1.0, "E") not in hits(warehouse, "--idle-hours", "1", "--max-interactive-hours", "3")


def test_sweep_equals_single_thresholds(warehouse: Path) -> None:
    sweep = replay_json(warehouse, "--idle-hours", "0.25,0.5", "--idle-hours", "1,2")
    singles = [
        r for h in ("0.25", "0.5", "1", "2") for r in replay_json(warehouse, "--idle-hours", h)
    ]
    assert sweep == singles


def test_one_pass_gives_the_table_and_the_jobs(warehouse: Path) -> None:
    """replay_with_jobs (the dashboard's, on its read-only connection): replay's table and jobs
    list from one pass; a sweep's jobs at a threshold are that threshold's own replay's; its
    temporary table is gone after."""
    con = read_only_connection(warehouse)
    try:
        rule = make_rule(["0.25,0.5,1,2"], 10.0)
        table, jobs = replay_with_jobs(con, rule, cluster="c")
        assert_frame_equal(table, replay(con, rule, cluster="c"), check_exact=False)
        assert jobs.equals(replay(con, rule, cluster="c", jobs=True))
        for h in rule.idle_hours:
            single = replay(con, make_rule([str(h)], 10.0), cluster="c", jobs=True)
            assert jobs.filter(pl.col("idle_hours") == h).equals(single), h
        assert set(jobs["job_id"]) >= {"A", "B", "D", "F", "G", "H"}
        assert con.sql("select count(*) from duckdb_tables() where temporary").fetchall() == [(0,)]
    finally:
        con.close()


def test_period_and_formats(warehouse: Path) -> None:
    assert replay_json(warehouse, "--idle-hours", "1", "--since", "2026-11-02") == []
    until = (at(0) + timedelta(seconds=1)).isoformat()
    assert replay_json(warehouse, "--idle-hours", "1", "--until", until)[0]["jobs"] == 8
    assert replay_json(warehouse, "--idle-hours", "1", "--until", at(0).isoformat()) == []
    out = CliRunner().invoke(
        app, ["policy", "replay", "--data-dir", str(warehouse), "--idle-hours", "1", "--format",
              "csv"],
    )  # fmt: skip
    assert out.exit_code == 0
    rows = list(csv.DictReader(io.StringIO(out.stdout)))
    assert [r["vc"] for r in rows] == ["(all)", "x", "y", "z"] and rows[0]["jobs_hit"] == "6"
    table = CliRunner().invoke(
        app, ["policy", "replay", "--data-dir", str(warehouse), "--idle-hours", "1"]
    )
    assert table.exit_code == 0 and "Replay of the cancel rule" in table.stdout


def test_python_api_equals_cli(warehouse: Path) -> None:
    con = open_warehouse(warehouse, "c")
    try:
        df = replay(con, make_rule(["1"]), cluster="c", jobs=True)
    finally:
        con.close()
    assert sorted(df["job_id"].to_list()) == ["A", "B", "D", "F", "G", "H"]
    assert set(df["user"].to_list()) == {"u1"} and set(df["gpus"].to_list()) == {1, 2}


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--idle-hours", "x"], "--idle-hours 'x' is not accepted: it must be a number greater"),
        (["--idle-hours", "0"], "--idle-hours '0' is not accepted"),
        (["--idle-hours", "1,,2"], "--idle-hours is needed"),
        (["--idle-hours", "nan"], "--idle-hours 'nan' is not accepted"),
        (["--idle-hours", "1", "--only", "gpu"], "--only 'gpu' is not accepted: it must be one"),
        (["--idle-hours", "1", "--grace-minutes", "-5"], "--grace-minutes '-5.0' is not"),
        (["--idle-hours", "1", "--max-interactive-hours", "0"], "--max-interactive-hours '0.0'"),
        (["--idle-hours", "1", "--until", "soon"], "--until 'soon' is not a period"),
        (["--idle-hours", "1", "--since", "2026-11-02", "--until", "2026-11-01"], "is not before"),
        (["--idle-hours", "1", "--cluster", "nope"], "no analyzed jobs for cluster 'nope'"),
    ],
)
def test_mistakes_are_one_sentence(warehouse: Path, args: list[str], says: str) -> None:
    out = CliRunner().invoke(app, ["policy", "replay", "--data-dir", str(warehouse), *args])
    assert isinstance(out.exception, GpuwasteError) and out.stdout == ""
    assert says in str(out.exception) and "\n" not in str(out.exception)


def test_a_mistake_exits_2_with_one_line(warehouse: Path) -> None:
    """Through the installed command: one line on stderr, exit status 2 (a usage error), no
    traceback."""
    exe = Path(sys.executable).parent / "gpuwaste"
    done = subprocess.run(
        [str(exe), "policy", "replay", "--data-dir", str(warehouse), "--idle-hours", "-1"],
        capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert done.returncode == 2 and done.stdout == ""
    assert (
        done.stderr == "gpuwaste: --idle-hours '-1' is not accepted: it must be a number "
        "greater than 0.\n"
    )


def test_no_analysis_yet(tmp_path: Path) -> None:
    out = CliRunner().invoke(
        app, ["policy", "replay", "--data-dir", str(tmp_path), "--idle-hours", "1"]
    )
    assert isinstance(out.exception, GpuwasteError)
    assert "run `gpuwaste analyze` first" in str(out.exception)


def test_dashboard_page_draws_the_sweep(warehouse: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Policies page, headless: its chart's points are the command line's '(all)' rows, a VC
    filter sums that VC's rows, every table has its CSV button, a wrong threshold is named."""
    from streamlit.testing.v1 import AppTest

    from gpuwaste.config import DATA_DIR_ENV
    from tests.test_dashboard_app import APP, TIMEOUT, _charts, _open

    monkeypatch.setenv(DATA_DIR_ENV, str(warehouse))
    at = _open(AppTest.from_file(APP, default_timeout=TIMEOUT), "policies", idle_hours="0.5,1")
    (chart,) = _charts(at).values()
    points = chart.data["sweep"]
    cli = {r["idle_hours"]: r for r in replay_json(warehouse, "--idle-hours", "0.5,1")
           if r["vc"] == "(all)"}  # fmt: skip
    for r in points.iter_rows(named=True):
        want = cli[r["idle_hours"]]
        key = "reclaimed_gpu_h" if r["series"] == "Reclaimed" else "work_lost_gpu_h"
        assert r["gpu_h"] == pytest.approx(want[key])
        assert (r["jobs_hit"], r["wrongful_hits"]) == (want["jobs_hit"], want["wrongful_hits"])
    assert points.height == 2 * 2
    assert len(at.dataframe) == 2 and len(at.get("download_button")) == 2
    hits = at.dataframe[1].value
    assert sorted(hits["Job id"].to_list()) == ["A", "B", "D", "F", "G", "H"]  # at 0.5 h
    at = _open(AppTest.from_file(APP, default_timeout=TIMEOUT), "policies", idle_hours="1",
               vc=["y"])  # fmt: skip
    (chart,) = _charts(at).values()
    y = next(r for r in replay_json(warehouse, "--idle-hours", "1") if r["vc"] == "y")
    got = chart.data["sweep"].filter(pl.col("series") == "Reclaimed").row(0, named=True)
    assert got["gpu_h"] == pytest.approx(y["reclaimed_gpu_h"]) and got["jobs_hit"] == 2
    at = _open(AppTest.from_file(APP, default_timeout=TIMEOUT), "policies", idle_hours="-2")
    assert [w.value for w in at.warning] == [
        # the error quotes the URL's value: shown as a code span (widgets.plain)
        "`--idle-hours '-2' is not accepted: it must be a number greater than 0.`"
    ]
