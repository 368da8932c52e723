"""Each dashboard page's logic, run headless by streamlit.testing.v1.AppTest over a warehouse.

The `warehouse` fixture is the one place that decides which warehouse the pages read."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from harness.result_warehouse import (
    NASTY_NAME,
    NASTY_USER,
    Built,
    build_result_warehouse,
)
from streamlit.testing.v1 import AppTest

import gpuwaste.dashboard
from gpuwaste.config import DATA_DIR_ENV
from gpuwaste.dashboard.filters import Filters

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


def _metric(at: AppTest, label: str) -> str:
    (value,) = [str(m.value).replace(",", "").removesuffix(" GPU h") for m in at.metric
                if m.label == label]  # fmt: skip
    return value


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
    assert trend.series("lines", "kind") == ["Allocated", "Busy (not idle)"]
    legend = trend.spec["layer"][0]["encoding"]["color"]["scale"]["domain"]
    assert legend == ["Idle slots", "Never-used GPUs", "No data", "Allocated", "Busy (not idle)"]
    assert "of which" not in charts["Where the GPU hours went"].series("bars", "group")
    labels = [m.label for m in at.metric]
    assert labels[:3] == ["GPU utilization (time-weighted mean)", "GPU hours allocated",
                          "Busy (not idle)"]  # fmt: skip
    assert float(_metric(at, "GPU hours allocated")) > 0
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
        & (pl.col("gpu_model") == "(all)")
        & pl.col("day").cast(pl.String).is_in(["2026-10-02", "2026-10-03"])
    )["alloc_gpu_h"].sum()
    assert float(_metric(at, "GPU hours allocated")) == pytest.approx(want, abs=0.5)
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
    assert set(shares["VC"]) == {*warehouse.vcs, "(all)"}


def test_waste_page_shows_the_studies_tables(app: AppTest) -> None:
    at = _open(app, "waste")
    charts = _charts(at)
    assert "Idle-slot and never-used GPU time" in charts
    assert "Jobs with at least one never-used GPU" in charts
    heat = charts["% of GPU time in stable phases: (all)"]
    cells = heat.data["cells"]
    assert cells["m"].n_unique() == 4 and cells["t"].n_unique() == 5 and cells.height == 20
    assert [layer["mark"]["type"] for layer in heat.spec["layer"]] == ["rect", "text"]
    split = [c.value for c in at.caption if "Idle held versus empty" in c.value]
    assert len(split) == 1 and "held GPU memory with no kernel running" in split[0]
    at2 = _open(AppTest.from_file(APP, default_timeout=TIMEOUT), "waste", vc=["nlp", "vision"])
    titles = set(_charts(at2))
    assert {
        "% of GPU time in stable phases: nlp",
        "% of GPU time in stable phases: vision",
    } <= titles


def test_headline_figures_follow_a_user_filter(app: AppTest, warehouse: Built) -> None:
    import polars as pl

    from gpuwaste.warehouse.store import Warehouse

    everyone = _open(app)
    user = warehouse.jobs.group_by("user").len().sort("len", descending=True)["user"][0]
    at = _open(AppTest.from_file(APP, default_timeout=TIMEOUT), None, user=user)
    gpus = Warehouse(warehouse.data_dir).read("job_gpu_usage")
    mine = gpus.join(warehouse.jobs.filter(pl.col("user") == user).select("job_id"), on="job_id")
    want_alloc = mine["alloc_s"].sum() / 3600
    want_util = (mine["util_mean"] * mine["observed_s"]).sum() / mine["observed_s"].sum()
    assert float(_metric(at, "GPU hours allocated")) == pytest.approx(want_alloc, abs=0.5)
    assert float(_metric(at, "Idle slots")) == pytest.approx(mine["idle_slot_s"].sum() / 3600,
                                                              abs=0.5)  # fmt: skip
    util = _metric(at, "GPU utilization (time-weighted mean)")
    assert float(util.rstrip("%")) == pytest.approx(want_util, abs=0.05)
    assert _metric(at, "GPU hours allocated") != _metric(everyone, "GPU hours allocated")
    assert _metric(at, "GPU utilization (time-weighted mean)") != _metric(
        everyone, "GPU utilization (time-weighted mean)"
    )
    # the breakdown chart shows the same figures
    bars = _charts(at)["Where the GPU hours went"].data["bars"]
    assert bars.filter(pl.col("kind") == "Allocated")["gpu_h"][0] == pytest.approx(want_alloc)


def test_utilization_has_one_name(app: AppTest) -> None:
    """The headline is the one figure called GPU utilization; others carry their own names."""
    at = _open(app)
    labels = [m.label for m in at.metric]
    assert [x for x in labels if "utilization" in x.lower()] == [
        "GPU utilization (time-weighted mean)"
    ]
    assert "Used (busy)" not in labels
    at = _open(AppTest.from_file(APP, default_timeout=TIMEOUT), "waste")
    titles = {c for d in at.dataframe for c in d.value.columns}
    assert not [t for t in titles if "util" in t.lower() and "time-weighted" not in t
                and "of its GPUs" not in t and "Per-minute" not in t]  # fmt: skip


def test_tables_read_as_hours_and_utc_minutes(app: AppTest, warehouse: Built) -> None:
    import re

    at = _open(app)
    (top_jobs,) = [d.value for d in at.dataframe if "Job id" in d.value.columns]
    assert {"GPU hours", "GPU hours lost", "Start (UTC)", "End (UTC)"} <= set(top_jobs.columns)
    assert not [c for c in top_jobs.columns if "_" in c]  # no raw column names
    for column in ("Start (UTC)", "End (UTC)"):
        values = top_jobs[column].dropna().tolist()
        assert values and all(re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d|running", v)
                                         for v in values), values  # fmt: skip
    waste = _open(AppTest.from_file(APP, default_timeout=TIMEOUT), "waste")
    columns = {c for d in waste.dataframe for c in d.value.columns}
    assert not [c for c in columns if "_" in c]  # titles for people, no raw column names
    assert {"GPU hours", "Idle-slot GPU hours", "Never-used GPU hours"} <= columns


def test_bad_link_values_are_named_on_the_page(app: AppTest) -> None:
    at = _open(app, None, cluster="nosuch", vc=["nlp", "zzz"], period="2026-13-01",
               size=">8", state="exploded", threshold="30")  # fmt: skip
    warnings = [str(w.value) for w in at.warning if "link" in str(w.value)]
    assert len(warnings) == 4, warnings
    assert "cluster=`nosuch`" in warnings[0] and "showing `cluster demo` instead" in warnings[0]
    assert "vc=`zzz`" in warnings[1] and "showing `VC nlp` instead" in warnings[1]
    assert "period=`2026-13-01`" in warnings[2] and "whole analyzed window" in warnings[2]
    assert "state=`exploded`" in warnings[3] and "all states" in warnings[3]
    assert at.sidebar.multiselect(key="vc").value == ["nlp"]
    # good values: no warning
    at = _open(AppTest.from_file(APP, default_timeout=TIMEOUT), None, cluster="demo", vc="nlp",
               period=["2026-10-02", "2026-10-03"], size=">8", state="killed")  # fmt: skip
    assert not [w for w in at.warning if "link" in str(w.value)]


def test_bad_link_values_of_the_cdf_page_are_named(app: AppTest) -> None:
    at = _open(app, "cdfs", resource="GPU fun", threshold="500", side="maybe")
    warnings = [str(w.value) for w in at.warning]
    assert any("resource=`GPU fun`" in w and "GPU utilization" in w for w in warnings), warnings
    assert any("threshold=`500`" in w and "50" in w for w in warnings), warnings
    assert any("side=`maybe`" in w for w in warnings), warnings


def test_overview_warns_when_results_are_older_than_the_data(app: AppTest) -> None:
    # the built warehouse was never analyzed: no analyze_state
    at = _open(app)
    warnings = [str(w.value) for w in at.warning]
    assert any("Results of cluster `demo` are older than its data" in w
               and "gpuwaste analyze" in w for w in warnings), warnings  # fmt: skip
    (fresh,) = [d.value for d in at.dataframe if "Last analyze (UTC)" in d.value.columns]
    assert set(fresh["Source"]) == {"prometheus", "slurm"}
    assert (fresh["Last ingest (UTC)"] == "2026-10-08 00:05").all()  # the builder's updated_at
    assert (fresh["Last analyze (UTC)"] == "never").all()


def test_overview_says_why_no_gpu_hours(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`gpuwaste ingest csv` with a mapping that names no allocation, then analyze: jobs, but no
    GPU time; the Overview says why instead of showing zeros."""
    from typer.testing import CliRunner

    from gpuwaste.cli import app as cli

    (tmp_path / "s.csv").write_text(
        "timestamp,node,gpu_index,gpu_util,job\n"
        + "".join(f"2026-10-01T00:{m:02d}:00Z,n1,{g},{50 * g},j1\n" for m in range(60)
                  for g in (0, 1))
    )  # fmt: skip
    (tmp_path / "j.csv").write_text(
        "id,owner,queue,started,finished,status,num_gpus\n"
        "j1,alice,vc1,2026-10-01T00:00:00Z,2026-10-01T01:00:00Z,passed,2\n"
    )
    (tmp_path / "m.toml").write_text(
        '[samples]\ntime = "timestamp"\nhost = "node"\ngpu = "gpu_index"\nutil = "gpu_util"\n'
        'job_id = "job"\n[jobs]\njob_id = "id"\nuser = "owner"\nvc = "queue"\n'
        'start = "started"\nend = "finished"\nstate = "status"\ngpus = "num_gpus"\n'
    )
    data_dir = tmp_path / "data"
    for args in (
        ["ingest", "csv", "--samples", str(tmp_path / "s.csv"), "--jobs", str(tmp_path / "j.csv"),
         "--mapping", str(tmp_path / "m.toml"), "--cluster", "c1", "--data-dir", str(data_dir)],
        ["analyze", "--data-dir", str(data_dir)],
    ):  # fmt: skip
        done = CliRunner().invoke(cli, args)
        assert done.exit_code == 0, done.output
    monkeypatch.setenv(DATA_DIR_ENV, str(data_dir))
    at = _open(AppTest.from_file(APP, default_timeout=TIMEOUT))
    (why,) = [str(w.value) for w in at.warning if "0 GPU hours allocated" in str(w.value)]
    assert why.startswith("1 jobs in this view but 0 GPU hours allocated")
    assert "job_gpus" in why and "allocation" in why


def test_overview_shows_gpu_hours_not_tied_to_a_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two Slurm jobs, no job label on the samples: the one holding both GPUs of n1 is tied
    (whole host), the one holding 1 of n2's 2 GPUs is not: 1 GPU hour not tied, beside the 2
    allocated, so 33.3% of the 3 scheduled GPU hours."""
    from typer.testing import CliRunner

    from gpuwaste.cli import app as cli

    (tmp_path / "s.csv").write_text(
        "timestamp,node,gpu_index,gpu_util\n"
        + "".join(f"2026-10-01T00:{m:02d}:00Z,{h},{g},50\n" for m in range(60)
                  for h in ("n1", "n2") for g in (0, 1))
    )  # fmt: skip
    (tmp_path / "m.toml").write_text(
        '[samples]\ntime = "timestamp"\nhost = "node"\ngpu = "gpu_index"\nutil = "gpu_util"\n'
    )
    times = "2026-10-01T00:00:00|2026-10-01T01:00:00"
    (tmp_path / "sacct.txt").write_text(
        "JobID|State|Start|End|AllocTRES|NodeList\n"
        f"1|COMPLETED|{times}|gres/gpu=2|n1\n2|COMPLETED|{times}|gres/gpu=1|n2\n"
    )
    data_dir = tmp_path / "data"
    for args in (
        ["ingest", "csv", "--samples", str(tmp_path / "s.csv"), "--mapping",
         str(tmp_path / "m.toml"), "--cluster", "c1", "--data-dir", str(data_dir)],
        ["ingest", "slurm", "--file", str(tmp_path / "sacct.txt"), "--cluster", "c1",
         "--data-dir", str(data_dir)],
        ["analyze", "--data-dir", str(data_dir)],
    ):  # fmt: skip
        done = CliRunner().invoke(cli, args)
        assert done.exit_code == 0, done.output
    monkeypatch.setenv(DATA_DIR_ENV, str(data_dir))
    at = _open(AppTest.from_file(APP, default_timeout=TIMEOUT))
    metrics = {m.label: m for m in at.metric}
    assert metrics["GPU hours allocated"].value == "2 GPU h"
    untied = metrics["GPU hours not tied to a GPU"]
    assert untied.value == "1 GPU h" and untied.delta == "33.3% of scheduled GPU hours"


def test_cdf_legend_stays_out_of_the_curves_and_panels_have_their_own_axes(app: AppTest) -> None:
    at = _open(app, "cdfs")
    overlay = _charts(at)["CDF of job GPU utilization (mean)"].spec
    legend = overlay["layer"][0]["encoding"]["color"]["legend"]
    assert legend["orient"] == "bottom"  # under the plot, not over it
    at.toggle(key="side").set_value(True).run()
    side = _charts(at)["CDF of job GPU utilization (mean)"].spec
    assert side["resolve"]["axis"] == {"x": "independent", "y": "independent"}
    enc = side["spec"]["layer"][0]["encoding"]
    assert enc["x"]["title"] is None and enc["y"]["title"] is None
    assert "GPU utilization (mean)" in side["title"]["subtitle"]


def test_waste_tables_say_what_to_do_and_list_the_worst_jobs(app: AppTest) -> None:
    at = _open(app, "waste")
    todo = [str(m.value) for m in at.markdown if "What to do" in str(m.value)]
    assert len(todo) >= 4 + 5  # four study sections, five cluster-level tables
    job_tables = [d for d in at.dataframe if "Job id" in d.value.columns]
    assert len(job_tables) >= 6
    heat = _charts(at)["% of GPU time in stable phases: (all)"].spec
    text = heat["layer"][1]["encoding"]["color"]
    low, top = heat["layer"][0]["encoding"]["color"]["scale"]["domain"]
    assert low < top  # the cells' own range (tests/test_dashboard_queries.py plants one)
    want = {"test": {"field": "pct", "gt": low + 0.7 * (top - low)}, "value": "white"}
    assert text["condition"] == want
    assert text["value"] == "black"


@pytest.mark.parametrize("page", [None, "cdfs", "waste"])
def test_every_table_has_a_csv_download(app: AppTest, page: str | None) -> None:
    at = _open(app, page)
    tables = at.dataframe
    buttons = at.get("download_button")
    assert len(tables) >= 1 and len(buttons) == len(tables)
    assert {b.proto.label for b in buttons} == {"Download CSV"}


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


@pytest.fixture
def demo(demo_warehouse: Path) -> Path:
    """The session's demo warehouse (tests/conftest.py)."""
    return demo_warehouse


# per page (and URL parameters past the cluster, e.g. a section), the charts it must draw
EXPECTED: dict[str | None, set[str]] = {
    None: {"Where the GPU hours went", "GPU hours per day", "Top users by GPU hours lost"},
    "cdfs": {
        "CDF of job GPU utilization (mean)",
        "CDF of job GPU utilization (max)",
        "Per-minute GPU utilization by job size (GPUs)",
        "Per-minute GPU utilization by final status",
    },
    "waste": {"Idle-slot and never-used GPU time", "Jobs with at least one never-used GPU"},
    "queue?chart=true": {"Waiting time by cause and job size"},
    "queue?section=Waits behind idle GPUs": {
        "GPU hours waited behind idle GPUs, by the idle GPUs' VC"
    },
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
            for key, titles in EXPECTED.items():
                page, _, query = key.partition("?") if key else (None, "", "")
                params: dict[str, str | list[str]] = {"cluster": cluster}
                params.update(dict(x.split("=") for x in query.split("&") if x))
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
                if page == "waste" and cluster == "philly-sample":  # no memory readings
                    split = [c.value for c in at.caption if "Idle held versus empty" in c.value]
                    assert len(split) == 1 and "held idle" in split[0], split
                    assert "is not measured" in split[0], split
                if page is None:
                    (table3,) = con.sql(
                        "SELECT util_mean FROM util_by_size_status WHERE cluster = ? AND "
                        "vc = '(all)' AND gpu_model = '(all)' AND size = 'all' AND state = 'all'",
                        params=[cluster],
                    ).fetchall()[0]
                    _check_overview_of_an_analyzed_warehouse(at, float(table3))
    finally:
        con.close()


def test_by_model_table_leaves_out_roll_ups_of_one_model(
    demo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The demo cluster has one GPU model: its '(all)' model rows repeat the model's, and the
    Waste page leaves them out as `gpuwaste report waste_by_model` does
    (render.single_member_rollups); the '(all)' VC row stays, as it rolls up four VCs."""
    from gpuwaste.warehouse.readonly import read_only_connection

    con = read_only_connection(demo)
    try:
        model, jobs = con.sql(
            "SELECT gpu_model, jobs FROM waste_by_model WHERE cluster = 'demo' AND vc = '(all)' "
            "AND gpu_model <> '(all)'"
        ).fetchall()[0]
    finally:
        con.close()
    monkeypatch.setenv(DATA_DIR_ENV, str(demo))
    for params in ({}, {"vc": ["nlp", "vision"]}):
        at = _open(AppTest.from_file(APP, default_timeout=TIMEOUT), "waste", cluster="demo",
                   **params)  # fmt: skip
        (table,) = [d.value for d in at.dataframe if "Lost (% of GPU hours)" in d.value.columns]
        assert table["GPU model"].tolist() == [model] * table.shape[0], (params, table)
        assert len(set(table["VC"])) == table.shape[0] == max(1, len(params.get("vc", ()))), table
    assert table["VC"].tolist() == ["nlp", "vision"]
    everyone = _open(AppTest.from_file(APP, default_timeout=TIMEOUT), "waste", cluster="demo")
    (table,) = [d.value for d in everyone.dataframe if "Lost (% of GPU hours)" in d.value.columns]
    assert table["VC"].tolist() == ["(all)"] and table["Jobs"].tolist() == [jobs]


WAITED = "GPU hours jobs waited behind idle GPUs"


def test_waits_behind_idle_follow_the_user_as_the_holder(
    demo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a user filter, the tile (Overview, Waste tables) and the Queue page's waits behind
    idle GPUs are the other users' waits behind that user's idle GPUs: `gpuwaste report --by
    user`'s "GPU hours others waited while you idled" for the user. A user with no job shows none
    (not the whole cluster's figure), and each page says which filters these figures follow."""
    from gpuwaste.analyses.waste_by import waste_by
    from gpuwaste.config import Settings

    by_user = waste_by(Settings(data_dir=demo), "user", cluster="demo")
    top = by_user.sort("others_waited_gpu_h", descending=True).row(0, named=True)
    user, hours, waits = top["user"], top["others_waited_gpu_h"], top["others_waits"]
    assert hours > 1 and waits > 1
    monkeypatch.setenv(DATA_DIR_ENV, str(demo))

    def page(name: str | None, **params: str) -> AppTest:
        return _open(AppTest.from_file(APP, default_timeout=TIMEOUT), name, cluster="demo",
                     **params)  # fmt: skip

    everyone = float(_metric(page(None), WAITED))
    for name in (None, "waste"):
        at = page(name, user=user)
        assert float(_metric(at, WAITED)) == pytest.approx(hours, abs=0.5) and hours < everyone
        (delta,) = [str(m.delta) for m in at.metric if m.label == WAITED]
        assert delta == f"{waits:,} waits", delta
        assert [c for c in at.caption if "user filters as those of the idle GPUs' holder" in c.value
                and "not the GPU model, size or state" in c.value]  # fmt: skip
        nobody = page(name, user="nobody")
        assert WAITED not in [m.label for m in nobody.metric]
    idle = "Waits behind idle GPUs"  # the holders table is in that section of the page
    queue = page("queue", user=user, section=idle)
    (holders,) = [d.value for d in queue.dataframe if "GPU hours others waited" in d.value.columns]
    assert set(holders["User"]) == {user}
    assert holders["GPU hours others waited"].sum() == pytest.approx(hours, abs=0.05 * 2)
    (note,) = [c.value for c in queue.caption if c.value.startswith("Tables 2 and 7")]
    assert "follow the cluster, VC, GPU model, period and user filters" in note
    assert "The size and state filters do not apply to them" in note
    assert "failed attempts follow every filter" in note
    nobody = page("queue", user="nobody", section=idle)
    assert not [d for d in nobody.dataframe if "GPU hours others waited" in d.value.columns]


@pytest.mark.slow
def test_totals_of_the_jobs_in_view_equal_waste_daily(demo: Path) -> None:
    """With a user, size or state filter the Overview sums the jobs' GPU rows itself
    (queries.job_gpu_hours); over the same cluster, VCs and days that equals analyze's
    waste_daily, column for column, and its energy equals energy_daily's (what the Overview
    reads without those filters, queries.energy_totals)."""
    from datetime import date

    from gpuwaste.dashboard import queries as q
    from gpuwaste.warehouse.readonly import read_only_connection

    con = read_only_connection(demo)
    try:
        day = con.sql("SELECT min(day) FROM waste_daily WHERE cluster = 'demo'").fetchall()[0][0]
        assert isinstance(day, date)
        measured = 0
        for f in (
            Filters(cluster="demo"),
            Filters(cluster="demo", vcs=("nlp", "vision")),
            Filters(cluster="demo", start=day, end=day),
            Filters(cluster="philly-sample"),
        ):
            daily = q.gpu_hours(con, f).row(0, named=True)
            jobs = q.job_gpu_hours(con, f).row(0, named=True)
            assert daily["observed_gpu_h"] > 0
            # idle held / empty and energy (issue 44) are not in waste_daily (energy per day is
            # energy_daily's: compared below)
            per_job_only = {
                "idle_held_gpu_h",
                "idle_empty_gpu_h",
                "energy_kwh",
                "lost_energy_kwh",
                "held_idle_energy_kwh",
            }
            assert set(jobs) - set(daily) == per_job_only, f
            for column in set(jobs) & set(daily):
                assert jobs[column] == pytest.approx(daily[column], rel=1e-6, abs=1e-6), (f, column)
            energy = q.energy_totals(con, f).row(0, named=True)
            assert set(energy) == {"energy_kwh", "lost_energy_kwh"}
            for column, kwh in energy.items():
                if jobs[column] is None:  # no GPU in view with a power reading
                    assert kwh is None, (f, column)
                else:
                    measured += 1
                    assert kwh == pytest.approx(jobs[column], rel=1e-6, abs=1e-9), (f, column)
        assert measured, "no view of the demo has a power reading: the energy is not compared"
    finally:
        con.close()


@pytest.mark.slow
def test_size_filter_selects_per_minute_sizes(demo: Path) -> None:
    """util_minute_hist keeps GPU counts (1, 4, 8, 16) and 'all'; the filter's classes map to
    them."""
    from gpuwaste.dashboard import queries as q
    from gpuwaste.warehouse.readonly import read_only_connection

    con = read_only_connection(demo)
    try:
        by_size = q.minute_cdf(con, Filters(cluster="demo", sizes=("2-4", ">8")), "size")
        assert set(by_size["grp"]) == {"4", "16"}
        by_state = q.minute_cdf(con, Filters(cluster="demo", sizes=("5-8",)), "state")
        assert by_state.height and by_state["cdf"].max() == pytest.approx(1.0)
    finally:
        con.close()


@pytest.mark.slow
def test_minute_cdf_counts_every_gpu_minute_once(demo: Path) -> None:
    """Without filters, each per-minute curve holds the GPU-minutes of its jobs in job_util_hist:
    the table's rows summed over sizes ('all') and over states ('all') are not added again."""
    from gpuwaste.dashboard import queries as q
    from gpuwaste.warehouse.readonly import read_only_connection

    con = read_only_connection(demo)
    try:
        per_job = con.sql(
            "SELECT j.state, cast(j.gpus AS varchar) AS size, sum(h.gpu_minutes) AS m "
            "FROM job_util_hist h JOIN job_usage j USING (cluster, job_id) "
            "WHERE h.cluster = 'demo' GROUP BY ALL"
        ).pl()
        for by, key, curves in (("state", "state", None), ("size", "size", {"1", "4", "8", "16"})):
            got = q.minute_cdf(con, Filters(cluster="demo"), by)
            got = got.group_by("grp").agg(pl.col("gpu_minutes").sum())
            expected = per_job.group_by(key).agg(pl.col("m").sum())
            checked = 0
            for group, minutes in expected.iter_rows():
                if curves is None or group in curves:
                    row = got.filter(pl.col("grp") == group)["gpu_minutes"]
                    assert row[0] == pytest.approx(minutes), (by, group)
                    checked += 1
            assert checked >= 2, by
    finally:
        con.close()


def _check_overview_of_an_analyzed_warehouse(at: AppTest, table3: float) -> None:
    """Just analyzed: when each source was ingested and the cluster analyzed, no stale warning;
    a running job ends "running"; the headline utilization is Philly Table 3's over the cluster
    (util_by_size_status, all sizes and states)."""
    import re

    util = _metric(at, "GPU utilization (time-weighted mean)")
    assert float(util.rstrip("%")) == pytest.approx(table3, abs=0.05)
    (fresh,) = [d.value for d in at.dataframe if "Last analyze (UTC)" in d.value.columns]
    stamp = r"\d{4}-\d\d-\d\d \d\d:\d\d"
    assert all(re.fullmatch(stamp, v) for v in fresh["Last analyze (UTC)"]), fresh
    assert all(re.fullmatch(stamp, v) for v in fresh["Last ingest (UTC)"]), fresh
    assert not (fresh["Results stale"] == "yes").any(), fresh  # booleans read yes/no
    assert not [w for w in at.warning if "older than its data" in str(w.value)]
    (jobs,) = [d.value for d in at.dataframe if "Job id" in d.value.columns]
    ends = jobs.loc[jobs["State"] == "running", "End (UTC)"].tolist()
    assert ends == ["running"] * len(ends)
    assert "None" not in jobs.astype(str).to_numpy().ravel().tolist()
