"""Each dashboard page's logic, run headless by streamlit.testing.v1.AppTest over a warehouse.

The `warehouse` fixture is the one place that decides which warehouse the pages read."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

import gpuwaste.dashboard
from gpuwaste.config import DATA_DIR_ENV
from gpuwaste.dashboard.filters import Filters
from tests.support.result_warehouse import (
    NASTY_NAME,
    NASTY_USER,
    Built,
    build_demo_warehouse,
    build_result_warehouse,
)

TIMEOUT = 60
APP = str(Path(gpuwaste.dashboard.__file__).parent / "app.py")


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return build_result_warehouse(tmp_path_factory.mktemp("wh") / "data", n_jobs=500, seed=11)


@pytest.fixture
def app(warehouse: Built, monkeypatch: pytest.MonkeyPatch) -> Iterator[AppTest]:
    monkeypatch.setenv(DATA_DIR_ENV, str(warehouse.data_dir))
    yield AppTest.from_file(APP, default_timeout=TIMEOUT)


def _open(at: AppTest, page: str | None = None, **params: str | list[str]) -> AppTest:
    for k, v in params.items():
        at.query_params[k] = v
    at.run()
    if page:
        at.switch_page(f"views/{page}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


class Chart:
    """A chart as the page sent it: its Vega-Lite spec and its datasets as polars frames."""

    def __init__(self, proto: Any) -> None:
        import polars as pl
        import pyarrow as pa

        self.spec: dict[str, Any] = json.loads(proto.spec)
        self.data: dict[str, pl.DataFrame] = {}
        for d in proto.datasets:
            frame = pl.from_arrow(pa.ipc.open_stream(d.data.data).read_all())
            assert isinstance(frame, pl.DataFrame)
            self.data[d.name] = frame
        self.alt = proto.alt

    def series(self, dataset: str, column: str) -> list[str]:
        return self.data[dataset][column].unique(maintain_order=True).to_list()


def _charts(at: AppTest) -> dict[str, Chart]:
    out: dict[str, Chart] = {}
    for el in at.get("vega_lite_chart"):
        chart = Chart(el.proto)
        title = chart.spec["title"]["text"]
        assert chart.alt == title  # the chart's accessible name, which the browser test reads
        out[title] = chart
    return out


def _texts(at: AppTest) -> list[str]:
    return [str(t.value) for t in at.text]


def test_overview_breaks_down_gpu_hours(app: AppTest) -> None:
    at = _open(app)
    assert at.title[0].value == "Overview"
    charts = _charts(at)
    assert set(charts) == {
        "Where the GPU hours went",
        "GPU hours per day",
        "Top users by GPU hours lost",
    }
    breakdown = charts["Where the GPU hours went"].data["bars"]
    assert breakdown.height == 8  # allocated, busy, 3 lost, 3 job kinds
    trend = charts["GPU hours per day"]
    assert trend.series("lost", "kind") == ["Idle slots", "Never-used GPUs", "No data"]
    assert trend.series("lines", "kind") == ["Allocated", "Busy"]
    labels = [m.label for m in at.metric]
    assert labels[:2] == ["GPU hours allocated", "Used (busy)"]
    assert float(at.metric[0].value.replace(",", "")) > 0
    assert len(at.dataframe) >= 3  # top users, top jobs, freshness, quarantine


def test_filters_come_from_the_url(app: AppTest) -> None:
    at = _open(app, "cdfs", vc="nlp", size=["1", "2-4"], threshold="30")
    assert at.sidebar.multiselect(key="vc").value == ["nlp"]
    assert at.sidebar.multiselect(key="size").value == ["1", "2-4"]
    assert "VC nlp" in _texts(at)[0] and "size 1, 2-4" in _texts(at)[0]
    mean = _charts(at)["CDF of job GPU utilization (mean)"]
    names = mean.series("curves", "curve")
    assert len(names) == 2 and names[0].startswith("nlp (") and names[1].startswith("(all) (")
    assert all("≤ 30" in n for n in names)


def test_period_from_the_url_limits_the_totals(app: AppTest, warehouse: Built) -> None:
    import polars as pl

    from gpuwaste.warehouse.store import Warehouse

    at = _open(app, None, period=["2026-10-02", "2026-10-03"], vc="speech")
    daily = Warehouse(warehouse.data_dir).read("waste_daily")
    want = daily.filter(
        (pl.col("vc") == "speech")
        & pl.col("day").cast(pl.String).is_in(["2026-10-02", "2026-10-03"])
    )["alloc_gpu_h"].sum()
    assert float(str(at.metric[0].value).replace(",", "")) == pytest.approx(want, abs=0.5)
    assert "2026-10-02 to 2026-10-03" in _texts(at)[0]
    trend = _charts(at)["GPU hours per day"].data
    for part in ("lost", "lines"):
        assert trend[part]["day"].n_unique() == 2
        assert sorted(trend[part]["day"].unique()) == ["2026-10-02", "2026-10-03"]


def test_cdf_page_draws_quantiles_not_jobs(app: AppTest, warehouse: Built) -> None:
    at = _open(app, "cdfs")
    charts = _charts(at)
    for title in ("CDF of job GPU utilization (mean)", "CDF of job GPU utilization (max)"):
        curves = charts[title].data["curves"]
        assert curves["curve"].n_unique() == len(warehouse.vcs) + 1
        # 201 quantiles per curve, whatever the job count
        assert set(curves.group_by("curve").len()["len"].to_list()) == {201}
    assert "Per-minute GPU utilization by job size (GPUs)" in charts
    assert "Per-minute GPU utilization by final status" in charts
    at.radio(key="resource").set_value("CPU").run()
    assert "CDF of job CPU utilization (mean)" in _charts(at)
    at.toggle(key="side").set_value(True).run()
    side = _charts(at)["CDF of job CPU utilization (mean)"]
    assert side.spec["facet"]["field"] == "curve"  # one panel per VC
    assert side.spec["facet"]["sort"] == side.series("curves", "curve")
    shares = at.dataframe[0].value
    assert set(shares["vc"]) == {*warehouse.vcs, "(all)"}


def test_waste_page_shows_the_studies_tables(app: AppTest) -> None:
    at = _open(app, "waste")
    charts = _charts(at)
    assert "Idle-slot and never-used GPU time" in charts
    assert "Jobs with at least one never-used GPU" in charts
    heat = charts["% of GPU time in stable phases: (all)"]
    cells = heat.data["cells"]
    assert cells["m"].n_unique() == 4 and cells["t"].n_unique() == 5 and cells.height == 20
    assert [layer["mark"]["type"] for layer in heat.spec["layer"]] == ["rect", "text"]
    at2 = _open(AppTest.from_file(APP, default_timeout=TIMEOUT), "waste", vc=["nlp", "vision"])
    titles = set(_charts(at2))
    assert {
        "% of GPU time in stable phases: nlp",
        "% of GPU time in stable phases: vision",
    } <= titles


def test_job_page_timeline(app: AppTest, warehouse: Built) -> None:
    job = warehouse.drill_jobs[0]
    at = _open(app, "job", job=job)
    charts = _charts(at)
    (title,) = [t for t in charts if t.startswith("GPU utilization and memory per GPU")]
    fig = charts[title]
    gpus = warehouse.jobs.filter(warehouse.jobs["job_id"] == job)["gpus"][0]
    rows = fig.spec["vconcat"]
    assert len(rows) == gpus  # one row per GPU
    samples = fig.data["samples"]
    assert sorted(samples["row"].unique().to_list()) == list(range(gpus))
    for i, row in enumerate(rows):
        lines = [layer for layer in row["layer"] if layer["mark"]["type"] == "line"]
        assert [layer["encoding"]["y"]["field"] for layer in lines] == ["util", "mem_used_mib"]
        assert all({"filter": {"field": "row", "equal": i}} in layer["transform"]
                   for layer in row["layer"])  # fmt: skip
    kinds = set(fig.data["spans"]["kind"].to_list())
    assert {"idle slot", "stable phase"} <= kinds  # idle slots and stable phases shaded
    never = warehouse.jobs.filter(warehouse.jobs["job_id"] == job)["never_used_gpus"][0]
    marked = [r for r in rows if "NEVER USED" in r["title"]["text"]]
    assert len(marked) == never
    assert (fig.data["spans"]["kind"] == "never used").sum() == never
    assert not at.warning


def test_job_page_unknown_job_and_search(app: AppTest) -> None:
    at = _open(app, "job", job="does-not-exist")
    assert "No such job" in str(at.warning[0].value)
    at = _open(AppTest.from_file(APP, default_timeout=TIMEOUT), "job", q="mallory")
    (found,) = [d.value for d in at.dataframe]
    assert found["User"].to_list() == [NASTY_USER]


def test_untrusted_text_is_shown_as_text(app: AppTest, warehouse: Built) -> None:
    nasty = warehouse.jobs.filter(warehouse.jobs["user"] == NASTY_USER)["job_id"][0]
    at = _open(app, "job", job=nasty)
    header = next(t for t in _texts(at) if t.startswith("Job "))
    assert "\\x1b" in header and "\x1b" not in header  # control character escaped
    assert "<b>mallory</b>" in header  # shown literally, as st.text (never markdown/HTML)
    markdown = " ".join(str(m.value) for m in at.markdown)
    assert "mallory" not in markdown and "<script>" not in markdown
    named = warehouse.jobs.filter(warehouse.jobs["name"] == NASTY_NAME)["job_id"][0]
    at = _open(AppTest.from_file(APP, default_timeout=TIMEOUT), "job", job=named)
    assert any("<script>" in t and "\\x07" in t for t in _texts(at))


def test_sql_page(app: AppTest) -> None:
    at = _open(app, "sql")
    at.button(key="run").click().run()
    assert len(at.dataframe) == 2  # the table list, and the default example's result
    at.text_area(key="sql").set_value("SELECT count(*) AS n FROM job_usage")
    at.button(key="run").click().run()
    assert at.dataframe[-1].value["n"][0] == 500
    at.text_area(key="sql").set_value("COPY job_usage TO '/tmp/out.csv'")
    at.button(key="run").click().run()
    assert at.error and "Refused" in str(at.code[-1].value)
    at.text_area(key="sql").set_value("SELECT nope FROM job_usage")
    at.button(key="run").click().run()
    assert "nope" in str(at.code[-1].value) and not at.exception
    at.selectbox(key="example_table").set_value("waste_by_vc").run()
    assert "FROM waste_by_vc" in str(at.text_area(key="sql").value)
    assert not at.exception


@pytest.mark.parametrize("page", [None, "cdfs", "waste", "job", "sql"])
def test_missing_warehouse_says_what_to_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, page: str | None
) -> None:
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "nothing-here"))
    at = _open(AppTest.from_file(APP, default_timeout=TIMEOUT), page)
    assert "gpuwaste demo" in str(at.warning[0].value)
    assert not at.get("vega_lite_chart")


def test_ingested_but_not_analyzed_says_analyze(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import polars as pl

    from gpuwaste.warehouse.store import Warehouse

    jobs = pl.DataFrame({"job_id": ["1"], "user": ["u"], "state": ["passed"]})
    Warehouse(tmp_path).replace_file("jobs", "c", "slurm", jobs)
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    at = _open(AppTest.from_file(APP, default_timeout=TIMEOUT))
    assert "gpuwaste analyze" in str(at.warning[0].value)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_demo_warehouse(tmp_path_factory.mktemp("demo") / "data")


EXPECTED: dict[str | None, set[str]] = {
    None: {"Where the GPU hours went", "GPU hours per day", "Top users by GPU hours lost"},
    "cdfs": {
        "CDF of job GPU utilization (mean)",
        "CDF of job GPU utilization (max)",
        "Per-minute GPU utilization by job size (GPUs)",
        "Per-minute GPU utilization by final status",
    },
    "waste": {"Idle-slot and never-used GPU time", "Jobs with at least one never-used GPU"},
    "job": {"GPU utilization and memory per GPU"},
    "sql": set(),
}


@pytest.mark.slow
def test_every_page_on_the_demo_warehouse(demo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`gpuwaste demo --no-serve` output, every cluster, every page: the expected charts, with
    data, and no exception."""
    from gpuwaste.dashboard import queries as q
    from gpuwaste.warehouse.readonly import read_only_connection

    monkeypatch.setenv(DATA_DIR_ENV, str(demo))
    con = read_only_connection(demo)
    try:
        clusters = [r[0] for r in con.sql("SELECT DISTINCT cluster FROM job_usage").fetchall()]
        assert clusters
        for cluster in sorted(clusters):
            top = q.top_jobs(con, Filters(cluster=cluster), 1)
            for page, titles in EXPECTED.items():
                params: dict[str, str | list[str]] = {"cluster": cluster}
                if page == "job":
                    params["job"] = str(top["job_id"][0])
                at = _open(AppTest.from_file(APP, default_timeout=TIMEOUT), page, **params)
                charts = _charts(at)
                for title in titles:
                    (got,) = [c for t, c in charts.items() if t.startswith(title)]
                    assert got.data and all(d.height for d in got.data.values()), (
                        cluster,
                        page,
                        title,
                    )
                if page == "job":
                    assert str(params["job"]) in next(t for t in _texts(at) if t.startswith("Job "))
                if page == "sql":
                    assert at.dataframe and not at.error
    finally:
        con.close()
