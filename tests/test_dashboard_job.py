"""The Job page on the demo warehouse (`gpuwaste demo --no-serve`: the generator's files through
the real ingest and analyze), whose cluster has 8- and 16-GPU jobs: jobs with more than
COMPACT_ABOVE_GPUS GPUs get one heatmap of GPUs x time first, and per-GPU panels only for the
GPUs the operator picks; the time axis has one label format; the phase strip sits above the
plot, clear of the axis labels drawn inside it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness.result_warehouse import build_demo_warehouse
from streamlit.testing.v1 import AppTest

from gpuwaste.config import DATA_DIR_ENV
from gpuwaste.warehouse.readonly import read_only_connection
from tests.test_dashboard_app import APP, TIMEOUT, _charts, _open

HEATMAP = "GPU utilization, "
PANELS = "GPU utilization and memory per GPU"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_demo_warehouse(tmp_path_factory.mktemp("demo") / "data")


@pytest.fixture
def app(demo: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[AppTest]:
    monkeypatch.setenv(DATA_DIR_ENV, str(demo))
    yield AppTest.from_file(APP, default_timeout=TIMEOUT)


def _job(demo: Path, where: str) -> tuple[str, str, int]:
    """(cluster, job_id, gpus) of the first job matching `where` that has GPU samples."""
    con = read_only_connection(demo)
    try:
        rows = con.sql(
            "SELECT u.cluster, u.job_id, u.gpus FROM job_usage u "
            f"WHERE {where} AND EXISTS (SELECT 1 FROM gpu_samples g WHERE g.cluster = u.cluster "
            "AND g.job_id = u.job_id) ORDER BY u.idle_slots DESC, u.cluster, u.job_id LIMIT 1"
        ).fetchall()
    finally:
        con.close()
    assert rows, f"the demo warehouse has no job with {where}"
    return str(rows[0][0]), str(rows[0][1]), int(rows[0][2])


def _count(demo: Path, sql: str, *params: str) -> int:
    con = read_only_connection(demo)
    try:
        return int(con.execute(sql, list(params)).fetchall()[0][0])
    finally:
        con.close()


def test_a_16_gpu_job_gets_a_heatmap_first_and_panels_on_request(app: AppTest, demo: Path) -> None:
    cluster, job, gpus = _job(demo, "u.gpus = 16")
    at = _open(app, "job", job=job, cluster=cluster)
    charts = _charts(at)
    (title,) = [t for t in charts if t.startswith(HEATMAP)]
    assert title == f"GPU utilization, 16 GPUs (job {job})"
    assert not [t for t in charts if t.startswith(PANELS)]  # no 16 stacked panels
    heat = charts[title]
    cells = heat.data["cells"]
    assert cells["name"].n_unique() == gpus == len(heat.spec["layer"][0]["encoding"]["y"]["sort"])
    assert cells.group_by("name").len()["len"].max() <= 240  # time cells per GPU, bounded
    assert cells["util"].min() >= 0 and cells["util"].max() <= 100
    assert heat.spec["height"] == {"step": 16}  # 16 rows x 16 px
    # idle slots are drawn over the cells, one mark per idle_slots row
    slots = _count(demo, "SELECT count(*) FROM idle_slots WHERE cluster = ? AND job_id = ?",
                   cluster, job)  # fmt: skip
    assert slots > 0 and (heat.data["marked"]["kind"] == "idle slot").sum() == slots
    picker = at.multiselect(key=f"detail_gpus_{cluster}_{job}")
    assert picker.value == [] and len(picker.options) == gpus
    picker.set_value([0, 15]).run()
    panels = [c for t, c in _charts(at).items() if t.startswith(PANELS)]
    assert len(panels) == 1 and len(panels[0].spec["vconcat"]) == 2
    assert not at.exception


def test_never_used_gpus_are_marked_in_the_heatmap(app: AppTest, demo: Path) -> None:
    cluster, job, gpus = _job(demo, "u.gpus > 4 AND u.never_used_gpus > 0")
    never = _count(demo, "SELECT never_used_gpus FROM job_usage WHERE cluster = ? AND job_id = ?",
                   cluster, job)  # fmt: skip
    assert never > 0
    at = _open(app, "job", job=job, cluster=cluster)
    (heat,) = [c for t, c in _charts(at).items() if t.startswith(HEATMAP)]
    marked = heat.data["marked"]
    assert (marked["kind"] == "never used").sum() == never
    names = heat.spec["layer"][0]["encoding"]["y"]["sort"]
    assert sum("NEVER USED" in n for n in names) == never and len(names) == gpus


def test_a_job_with_few_gpus_keeps_its_panels(app: AppTest, demo: Path) -> None:
    cluster, job, gpus = _job(demo, "u.gpus BETWEEN 2 AND 4")
    at = _open(app, "job", job=job, cluster=cluster)
    charts = _charts(at)
    assert not [t for t in charts if t.startswith(HEATMAP)]
    (panels,) = [c for t, c in charts.items() if t.startswith(PANELS)]
    assert len(panels.spec["vconcat"]) == gpus
    # flags, figures, per GPU, idle slots, phases: each table with its CSV download
    assert len(at.dataframe) == 5
    assert [b.proto.label for b in at.get("download_button")] == ["Download CSV"] * 5


def test_one_time_format_and_the_phase_strip_above_the_plot(app: AppTest, demo: Path) -> None:
    cluster, job, _ = _job(demo, "u.gpus BETWEEN 2 AND 4 AND u.n_stable_phases > 0")
    at = _open(app, "job", job=job, cluster=cluster)
    (panels,) = [c for t, c in _charts(at).items() if t.startswith(PANELS)]
    axes = [
        layer["encoding"]["x"]["axis"]
        for row in panels.spec["vconcat"]
        for layer in row["layer"]
        if layer["encoding"]["x"].get("axis") is not None
    ]
    assert axes and all(re.fullmatch(r"(%b %d )?%H:%M", a["format"]) for a in axes)
    assert len({a["format"] for a in axes}) == 1
    strips = [
        layer["encoding"]
        for row in panels.spec["vconcat"]
        for layer in row["layer"]
        if {"filter": {"field": "kind", "equal": "stable phase"}} in layer["transform"]
    ]
    assert strips and all(s["y"]["value"] < 0 and s["y2"]["value"] <= 0 for s in strips)
