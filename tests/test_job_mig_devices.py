"""MIG instances in one job's views: `gpuwaste job` and the dashboard's Job page name each
device with `analyses.reads.device_name` (`host:gpu`, `host:gpu/gi2 (1g.10gb)` for an instance)
and keep two instances of one GPU apart: their rows, their strips and their timelines.

A hand-built job holds two 1g.10gb instances of one A100, one busy at 60 % and one idle
throughout, while the parent GPU's own series reads 99 %; then the generator's MIG host
(`gpuwaste generate --mig-hosts 1`), whose planted jobs (truth.json 'mig') each hold an
instance."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest
from streamlit.testing.v1 import AppTest
from typer.testing import CliRunner

from gpuwaste.act.job_report import LEVELS, gather, render_text
from gpuwaste.analyses import reads
from gpuwaste.analyses.run import analyze
from gpuwaste.cli import app
from gpuwaste.config import DATA_DIR_ENV, Settings
from gpuwaste.warehouse.readonly import read_only_connection
from gpuwaste.warehouse.store import Warehouse
from tests.support.mig_cluster import label_only_mig_cluster
from tests.test_dashboard_app import APP, TIMEOUT, _charts, _open

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
MODEL = "NVIDIA A100-SXM4-80GB"
BUSY, IDLE = "a1:0/gi1 (1g.10gb)", "a1:0/gi2 (1g.10gb)"
PANELS = "GPU utilization and memory per GPU"


def _write_pair(data_dir: Path) -> None:
    """Job `pair` holds instances 1 (60 % for the hour) and 2 (idle: never used) of GPU 0 of
    host a1 for an hour; the parent GPU's own series (no instance) reads 99 %."""
    end = T0 + timedelta(hours=1)
    rows = []
    for inst, util, mem in ((1, 60.0, 5000.0), (2, 0.0, 0.0), (None, 99.0, 70000.0)):
        for k in range(60):
            rows.append({
                "host": "a1", "gpu": 0, "gpu_instance": inst,
                "mig_profile": None if inst is None else "1g.10gb", "gpu_model": MODEL,
                "ts": T0 + timedelta(minutes=k), "util": util, "mem_used_mib": mem,
                "mem_total_mib": 81920.0 if inst is None else 10240.0,
                "job_id": None if inst is None else "pair",
            })  # fmt: skip
    wh = Warehouse(data_dir)
    wh.replace_window("gpu_samples", "c", T0, end, pl.DataFrame(rows))
    job = {"job_id": ["pair"], "user": ["ann"], "vc": ["v"], "state": ["passed"],
           "start_ts": [T0], "end_ts": [end], "gpus": [2]}  # fmt: skip
    wh.upsert("jobs", "c", "t", pl.DataFrame(job))
    spans = {"job_id": ["pair"] * 2, "attempt": [0, 0], "host": ["a1"] * 2, "gpu": [0, 0],
             "gpu_instance": [1, 2], "mig_profile": ["1g.10gb"] * 2,
             "start_ts": [T0] * 2, "end_ts": [end] * 2}  # fmt: skip
    wh.upsert("job_gpus", "c", "t", pl.DataFrame(spans))
    analyze(Settings(data_dir=data_dir), quiet=True)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pair") / "data"
    _write_pair(d)
    return d


def test_device_names() -> None:
    assert reads.device_name("n1", 3) == "n1:3"
    assert reads.device_name("n1", 3, None, None) == "n1:3"
    assert reads.device_name("n1", 0, 3, "1g.10gb") == "n1:0/gi3 (1g.10gb)"
    assert reads.device_name("n1", 0, 3) == "n1:0/gi3"  # an instance whose profile is unknown


def test_the_timeline_keeps_two_instances_of_one_gpu_apart(pair: Path) -> None:
    con = read_only_connection(pair)
    try:
        timeline = reads.job_timeline(con, "c", "pair")
    finally:
        con.close()
    per = timeline.group_by("gpu_instance").agg(
        pl.len(), lo=pl.col("util").min(), hi=pl.col("util").max()
    )
    assert sorted(per.rows()) == [(1, 60, 60.0, 60.0), (2, 60, 0.0, 0.0)]


def test_gpuwaste_job_names_each_instance_with_its_own_strip(pair: Path) -> None:
    res = CliRunner().invoke(
        app, ["job", "pair", "--data-dir", str(pair)], env={"COLUMNS": "250", "NO_COLOR": "1"}
    )
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    rows = [[c.strip() for c in line.strip("│").split("│")] for line in lines if "│ a1:0/" in line]
    table = {row[0]: row for row in rows}
    assert set(table) == {BUSY, IDLE}
    assert table[BUSY][1:3] == ["60.0", "60.0"]  # GPU utilization, mean and max (%)
    assert table[IDLE][-2:] == ["yes", "0.0"]  # never used, without data (%)
    strips = {line.split(" |")[0].strip(): line.split("|")[1] for line in lines if " |" in line}
    assert strips[BUSY] == LEVELS[4] * 60  # 60 % in every minute, not the pair's 30 % mean
    assert strips[IDLE] == "·" * 60
    res = CliRunner().invoke(app, ["job", "pair", "--data-dir", str(pair), "--format", "json"])
    report = json.loads(res.stdout)
    assert [g["device"] for g in report["gpus"]] == [BUSY, IDLE]
    assert [s["gpu"] for s in report["strips"]] == [BUSY, IDLE]


@pytest.fixture
def page(pair: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[AppTest]:
    monkeypatch.setenv(DATA_DIR_ENV, str(pair))
    yield AppTest.from_file(APP, default_timeout=TIMEOUT)


def test_the_job_page_draws_each_instance_as_its_own_row(page: AppTest) -> None:
    at = _open(page, "job", job="pair", cluster="c")
    (panels,) = [c for t, c in _charts(at).items() if t.startswith(PANELS)]
    titles = [r["title"]["text"] for r in panels.spec["vconcat"]]
    assert titles == [BUSY, f"{IDLE} — NEVER USED"]
    samples = panels.data["samples"]
    per_row = samples.group_by("row").agg(
        pl.len(), lo=pl.col("util").min(), hi=pl.col("util").max()
    )
    assert sorted(per_row.rows()) == [(0, 60, 60.0, 60.0), (1, 60, 0.0, 0.0)]
    table = [t for t in at.dataframe if "Device" in t.value.columns]  # the "Per GPU" table
    assert table and list(table[0].value["Device"]) == [BUSY, IDLE]


def test_the_generators_mig_jobs_are_named_by_their_planted_instance(tmp_path: Path) -> None:
    data, truth = label_only_mig_cluster(tmp_path)
    assert sum(j["gpu_instance"] is not None for j in truth) > 5  # and a whole GPU or two
    for job in truth:
        name = reads.device_of(job)
        text = render_text(gather(data, job["job_id"], "m", "http://dash"))
        rows = [line for line in text.splitlines() if line.startswith(f"{job['host']}:")]
        assert rows and all(r.startswith(name) for r in rows), (name, rows)
