"""The dashboard's queries, filters, SQL box and charts on a real DuckDB over a built warehouse.

Expected figures are computed independently with polars from the rows the builder wrote."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date, timedelta
from pathlib import Path

import duckdb
import polars as pl
import pytest
from harness.result_warehouse import NASTY_USER, Built, build_result_warehouse

from gpuwaste.analyses import reads
from gpuwaste.dashboard import charts, data, sqlbox
from gpuwaste.dashboard import queries as q
from gpuwaste.dashboard.filters import Filters
from gpuwaste.warehouse.readonly import read_only_connection
from gpuwaste.warehouse.results import ALL_MODELS, ALL_VCS
from gpuwaste.warehouse.store import Warehouse


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return build_result_warehouse(tmp_path_factory.mktemp("wh") / "data", n_jobs=600, seed=3)


@pytest.fixture
def con(built: Built) -> Iterator[duckdb.DuckDBPyConnection]:
    c = read_only_connection(built.data_dir)
    yield c
    c.close()


def _expected(jobs: pl.DataFrame, f: Filters) -> pl.DataFrame:
    """The jobs a Filters selects, by polars (overlap with the period)."""
    out = jobs
    if f.vcs:
        out = out.filter(pl.col("vc").is_in(f.vcs))
    if f.user:
        out = out.filter(pl.col("user") == f.user)
    if f.sizes:
        out = out.filter(pl.col("size_class").is_in(f.sizes))
    if f.states:
        out = out.filter(pl.col("state").is_in(f.states))
    if f.period_start and f.period_end:
        out = out.filter(
            (pl.col("start_ts") < f.period_end)
            & (pl.coalesce("end_ts", "start_ts") >= f.period_start)
        )
    return out


def test_filter_options_list_every_vc(con: duckdb.DuckDBPyConnection, built: Built) -> None:
    opts = q.filter_options(con)
    assert opts["cluster"].unique().to_list() == [built.cluster]
    assert sorted(opts["vc"].to_list()) == sorted(built.vcs)
    counts = dict(built.jobs.group_by("vc").len().iter_rows())
    assert dict(zip(opts["vc"], opts["jobs"], strict=True)) == counts


@pytest.mark.parametrize(
    "f",
    [
        Filters(cluster="demo"),
        Filters(cluster="demo", vcs=("nlp",)),
        Filters(cluster="demo", sizes=("2-4", ">8"), states=("killed",)),
        Filters(cluster="demo", start=date(2026, 10, 3), end=date(2026, 10, 4)),
        Filters(cluster="demo", user=NASTY_USER),
        Filters(cluster="elsewhere"),
    ],
)
def test_job_filters_select_what_polars_selects(
    con: duckdb.DuckDBPyConnection, built: Built, f: Filters
) -> None:
    want = _expected(built.jobs, f) if f.cluster == built.cluster else built.jobs.clear()
    got = q.job_counts(con, f).row(0, named=True)
    assert got["jobs"] == want.height
    assert got["gpu_h"] == pytest.approx(want["gpu_s"].sum() / 3600)
    top = q.top_jobs(con, f, limit=5)
    assert set(top["job_id"]) <= set(want["job_id"])


def test_period_filter_sums_daily_rows(con: duckdb.DuckDBPyConnection, built: Built) -> None:
    daily = Warehouse(built.data_dir).read("waste_daily")
    f = Filters(
        cluster="demo", vcs=("nlp", "speech"), start=date(2026, 10, 2), end=date(2026, 10, 4)
    )
    daily = daily.filter(pl.col("gpu_model") == ALL_MODELS)  # every GPU model together
    want = daily.filter(
        pl.col("vc").is_in(["nlp", "speech"]) & pl.col("day").is_between(f.start, f.end)
    )
    got = q.gpu_hours(con, f).row(0, named=True)
    assert got["alloc_gpu_h"] == pytest.approx(want["alloc_gpu_h"].sum())
    assert got["idle_slot_gpu_h"] == pytest.approx(want["idle_slot_gpu_h"].sum())
    assert got["days"] == 3
    # With no VC selected, the all-VC rows are read (not the VCs summed twice).
    all_rows = daily.filter(pl.col("vc") == ALL_VCS)
    total = q.gpu_hours(con, Filters(cluster="demo")).row(0, named=True)
    assert total["alloc_gpu_h"] == pytest.approx(all_rows["alloc_gpu_h"].sum())
    per_day = q.gpu_hours_daily(con, f)
    assert f.start is not None
    assert per_day["day"].to_list() == [f.start + timedelta(days=i) for i in range(3)]


def test_energy_of_the_view_from_the_daily_rows(
    con: duckdb.DuckDBPyConnection, built: Built
) -> None:
    """The Overview's kWh without a user, size or state filter (energy_daily summed, as the
    builder's energy_daily.sql wrote it): each GPU's kWh shared by its overlap with the period,
    computed here by polars from the GPU rows, the same VCs and models."""
    gpus = (
        Warehouse(built.data_dir)
        .read("job_gpu_usage")
        .join(
            built.jobs.select("job_id", "vc", pl.col("gpu_model").alias("job_model")), on="job_id"
        )
    )
    assert gpus["energy_kwh"].sum() > 0
    for f in (
        Filters(cluster="demo"),
        Filters(cluster="demo", vcs=("nlp",), start=date(2026, 10, 2), end=date(2026, 10, 3)),
        Filters(cluster="demo", models=(built.jobs["gpu_model"][0],), start=date(2026, 10, 5),
                end=date(2026, 10, 5)),
    ):  # fmt: skip
        rows = gpus.filter(pl.col("alloc_s") > 0)
        if f.vcs:
            rows = rows.filter(pl.col("vc").is_in(f.vcs))
        if f.models:
            rows = rows.filter(pl.col("job_model").is_in(f.models))
        share = pl.lit(1.0)
        if f.period_start and f.period_end:
            lo, hi = pl.lit(f.period_start), pl.lit(f.period_end)
            overlap = pl.min_horizontal("end_ts", hi) - pl.max_horizontal("start_ts", lo)
            share = (overlap.dt.total_microseconds().clip(lower_bound=0)
                     / (pl.col("end_ts") - pl.col("start_ts")).dt.total_microseconds())  # fmt: skip
        want = rows.select(
            (share * pl.col(c)).sum().alias(c) for c in ("energy_kwh", "lost_energy_kwh")
        )
        got = q.energy_totals(con, f)
        assert want["energy_kwh"][0] > 0, f
        for column in ("energy_kwh", "lost_energy_kwh"):
            assert got[column][0] == pytest.approx(want[column][0], rel=1e-9), (f, column)


def test_top_users_rank_by_lost_hours(con: duckdb.DuckDBPyConnection, built: Built) -> None:
    want = (
        built.jobs.group_by("user")
        .agg(((pl.col("idle_slot_gpu_s") + pl.col("never_used_gpu_s")).sum() / 3600).alias("lost"))
        .sort("lost", descending=True)
    )
    got = q.top_users(con, Filters(cluster="demo"), limit=3)
    assert got["user"].to_list() == want["user"].head(3).to_list()
    assert got["lost_gpu_h"][0] == pytest.approx(want["lost"][0], abs=0.01)


def test_cdf_is_a_few_hundred_points_per_vc(con: duckdb.DuckDBPyConnection, built: Built) -> None:
    curves = q.job_cdf(con, Filters(cluster="demo"), "util_mean")
    per_vc = dict(curves.group_by("vc").len().iter_rows())
    assert per_vc == {**dict.fromkeys(built.vcs, q.CDF_POINTS), ALL_VCS: q.CDF_POINTS}
    assert curves["vc"][-1] == ALL_VCS  # the all-VC curve is drawn last
    for vc in (*built.vcs, ALL_VCS):
        c = curves.filter(pl.col("vc") == vc).sort("x")
        jobs = built.jobs if vc == ALL_VCS else built.jobs.filter(pl.col("vc") == vc)
        util = jobs["util_mean"]
        assert c["jobs"][0] == util.len()
        ps = c["p"].to_list()
        assert ps == sorted(ps) and ps[-1] == pytest.approx(1.0)  # a CDF never goes down
        # every point is the exact share of jobs at or below x
        for x, p in c.select("x", "p").gather_every(20).iter_rows():
            assert p == pytest.approx((util <= x).mean()), (vc, x)
        # reading the share at or below an integer threshold off the curve is exact
        for t in (20.0, 50.0, 80.0):
            assert charts.share_below(c, t) == pytest.approx((util <= t).mean())
    one_vc = q.job_cdf(con, Filters(cluster="demo", vcs=("nlp",), sizes=("1",)), "cpu_util_max")
    assert set(one_vc["vc"]) == {"nlp", ALL_VCS}
    small = built.jobs.filter((pl.col("vc") == "nlp") & (pl.col("size_class") == "1"))
    assert one_vc["jobs"][0] == small.height
    assert q.job_cdf(con, Filters(cluster="nowhere"), "util_mean").height == 0
    with pytest.raises(ValueError):
        q.job_cdf(con, Filters(), "gpu_s; drop table x")


def test_minute_cdf_cumulates_to_one(con: duckdb.DuckDBPyConnection) -> None:
    for by in ("size", "state"):
        h = q.minute_cdf(con, Filters(cluster="demo", sizes=("1", "5-8")), by)
        assert h.height > 0
        for _, g in h.group_by("grp"):
            cdf = g.sort("bucket")["cdf"].to_list()
            assert cdf == sorted(cdf)
            assert cdf[-1] == pytest.approx(1.0)
        if by == "size":
            assert set(h["grp"]) <= {"1", "5-8"}


def test_summary_tables_follow_the_vc_filter(con: duckdb.DuckDBPyConnection, built: Built) -> None:
    for table in q.SUMMARY_ORDER:
        everyone = q.summary(con, Filters(cluster="demo"), table)
        assert set(everyone["vc"]) <= {ALL_VCS}, table
        two = q.summary(con, Filters(cluster="demo", vcs=("nlp", "vision")), table)
        assert set(two["vc"]) <= {"nlp", "vision"}, table
    waste = q.summary(con, Filters(cluster="demo"), "waste_by_vc")
    total = waste.filter(pl.col("kind") == "total").row(0, named=True)
    assert total["gpu_s"] == pytest.approx(built.jobs["gpu_s"].sum())


def test_job_lists_and_search(con: duckdb.DuckDBPyConnection, built: Built) -> None:
    f = Filters(cluster="demo")
    got = q.job_lists(con, f, ("debug_time_limit", "failed", "queued"), limit=5)
    assert got["list"].unique(maintain_order=True).to_list() == [
        "debug_time_limit", "failed", "queued"
    ]  # fmt: skip
    jobs = built.jobs.filter(pl.col("cluster") == "demo")
    want = {  # each list's condition and order, by hand
        "debug_time_limit": jobs.filter(pl.col("is_debug") & pl.col("hit_time_limit"))
        .with_columns(lost=((pl.col("idle_slot_gpu_s") + pl.col("never_used_gpu_s")) / 3600)
                      .round(2))
        .sort(["lost", "job_id"], descending=[True, False]),
        "failed": jobs.filter(pl.col("state").is_in(["killed", "unsuccessful"]))
        .sort(["gpu_s", "job_id"], descending=[True, False]),
        "queued": jobs.filter(pl.col("queue_delay_s").is_not_null())
        .sort(["queue_delay_s", "job_id"], descending=[True, False]),
    }  # fmt: skip
    for name, rows in want.items():
        assert rows.height > 0, name
        listed = got.filter(pl.col("list") == name)["job_id"].to_list()
        assert listed == rows["job_id"].head(5).to_list(), name
    every = q.job_lists(con, f, tuple(q.JOB_LISTS), limit=3)  # each reads only JOB_LIST_SOURCE
    assert set(every["list"]) <= set(q.JOB_LISTS) and every.group_by("list").len()["len"].max() == 3
    found = q.search_jobs(con, f, "mall")
    assert found["user"].to_list() == [NASTY_USER]
    assert q.search_jobs(con, f, "%").height == 0  # LIKE wildcards are literal
    prefix = built.jobs.filter(pl.col("job_id").str.starts_with("1000")).height
    assert q.search_jobs(con, f, "1000").height == min(200, prefix)
    assert q.search_jobs(con, f, "").height == min(200, built.jobs.height)
    assert q.search_jobs(con, f, "10002")["job_id"].str.starts_with("10002").all()


def test_job_timeline_stays_on_the_jobs_gpus(con: duckdb.DuckDBPyConnection, built: Built) -> None:
    job_id = built.drill_jobs[0]
    gpus = reads.job_rows(con, "job_gpu_usage", "demo", job_id)
    tl = reads.job_timeline(con, "demo", job_id)
    assert tl.height > 0
    keys = set(zip(gpus["host"], gpus["gpu"], strict=True))
    assert set(zip(tl["host"], tl["gpu"], strict=True)) == keys
    ts, starts, ends = tl["ts"].to_list(), gpus["start_ts"].to_list(), gpus["end_ts"].to_list()
    assert min(ts) >= min(starts) - timedelta(minutes=1)
    assert max(ts) <= max(ends)
    coarse = reads.job_timeline(con, "demo", job_id, points=10)
    per_gpu = coarse.group_by("host", "gpu").len()["len"]
    assert max(per_gpu.to_list()) <= 11
    assert reads.job_timeline(con, "demo", "no-such-job").height == 0
    never = gpus.filter(pl.col("never_used"))
    for host, gpu in never.select("host", "gpu").iter_rows():
        mine = tl.filter((pl.col("host") == host) & (pl.col("gpu") == gpu))
        assert mine["util"].max() == 0


def test_freshness_counts_quarantine(con: duckdb.DuckDBPyConnection) -> None:
    fr = reads.source_states(con, "demo")
    assert dict(zip(fr["source"], fr["quarantined"], strict=True)) == {"prometheus": 1, "slurm": 2}
    assert fr["watermark"].null_count() == 0
    reasons = q.quarantine_reasons(con, Filters(cluster="demo"))
    assert reasons["records"].sum() == 3


@pytest.mark.parametrize(
    "sql",
    [
        "COPY job_usage TO '/tmp/gpuwaste-dashboard-test.csv'",
        "ATTACH '/tmp/x.duckdb' AS x",
        "INSTALL httpfs",
        "LOAD httpfs",
        "INSERT INTO job_usage SELECT * FROM job_usage",
        "CREATE TABLE t AS SELECT 1",
        "SELECT 1; SELECT 2",
        "SELECT * FROM read_csv('/etc/passwd')",
        "SELECT * FROM read_parquet('/etc/*.parquet')",
        "SET enable_external_access = true",
    ],
)
def test_sql_box_refuses_anything_but_a_read(built: Built, sql: str) -> None:
    out = sqlbox.run(built.data_dir, sql)
    assert out.frame is None
    assert out.error
    assert not Path("/tmp/gpuwaste-dashboard-test.csv").exists()


def test_sql_box_runs_reads_and_shows_duckdbs_error(built: Built) -> None:
    ok = sqlbox.run(
        built.data_dir, "SELECT vc, count(*) AS n FROM job_usage GROUP BY vc ORDER BY vc"
    )
    assert ok.error is None and ok.frame is not None
    assert ok.frame["vc"].to_list() == sorted(built.vcs)
    bad = sqlbox.run(built.data_dir, "SELECT no_such_column FROM job_usage")
    assert bad.error is not None and "no_such_column" in bad.error
    capped = sqlbox.run(built.data_dir, "SELECT * FROM job_usage", max_rows=7)
    assert capped.frame is not None and capped.frame.height == 7 and capped.truncated
    for t in sqlbox.table_list()["table"]:
        from gpuwaste.warehouse.schema import all_tables

        ex = sqlbox.run(built.data_dir, sqlbox.example(all_tables()[t]))
        assert ex.error is None, (t, ex.error)


def test_status_says_what_to_run(tmp_path: Path, built: Built) -> None:
    missing = data.status(tmp_path / "nowhere", ())
    assert not missing.ok and "gpuwaste demo" in missing.message
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "gpuwaste ingest" in data.status(empty, data.warehouse_version(empty)).message
    facts = data.status(empty, (("gpu_samples", 0.0),))
    assert not facts.ok and "gpuwaste analyze" in facts.message
    assert data.status(built.data_dir, data.warehouse_version(built.data_dir)).ok


def test_filters_from_url_values() -> None:
    f = Filters.from_state(
        {"cluster": "a", "vc": ["x", "y"], "period": (date(2026, 1, 2), date(2026, 1, 3)),
         "user": "  bob ", "size": ["1", "nonsense"], "state": ["killed", "exploded"]}
    )  # fmt: skip
    assert f == Filters(
        "a", ("x", "y"), date(2026, 1, 2), date(2026, 1, 3), "bob", ("1",), ("killed",)
    )
    assert Filters.from_state({"period": (date(2026, 1, 2),)}).end == date(2026, 1, 2)
    assert Filters.from_state({}) == Filters()


def _expressions(spec: object) -> list[str]:
    """Every Vega expression in a spec: strings under expr/calculate/test, string filters."""
    found: list[str] = []
    if isinstance(spec, dict):
        for k, v in spec.items():
            if k == "datasets":
                continue
            if k in ("expr", "calculate", "test", "labelExpr") or (
                k == "filter" and isinstance(v, str)
            ):
                found.append(str(v))
            found += _expressions(v)
    elif isinstance(spec, list):
        for v in spec:
            found += _expressions(v)
    return found


def test_chart_labels_are_text_and_never_code() -> None:
    """Vega draws text as text, so a label is the data with its control characters escaped;
    and no value from the data may reach a Vega expression (layers pick rows by integers)."""
    import json
    from datetime import UTC, datetime

    assert charts.label("<a href='x'>y</a>\x1b") == "<a href='x'>y</a>\\x1b"
    nasty = charts.label(NASTY_USER)
    assert "\x1b" not in nasty and "<b>mallory</b>" in nasty
    users = pl.DataFrame({"user": [NASTY_USER, "bob"], "idle_slot_gpu_h": [1.0, 2.0],
                          "never_used_gpu_h": [0.5, 0.0]})  # fmt: skip
    t0 = datetime(2026, 10, 1, tzinfo=UTC)
    t1 = t0 + timedelta(hours=1)
    host = "n'); alert(1); ('"
    gpus = pl.DataFrame({"host": [host, host], "gpu": [0, 1], "never_used": [False, True],
                         "start_ts": [t0, t0], "end_ts": [t1, t1],
                         "mem_total_mib": [1000.0, 1000.0]})  # fmt: skip
    samples = pl.DataFrame({"host": [host] * 2, "gpu": [0, 0], "ts": [t0, t1],
                            "util": [0.0, 50.0], "mem_used_mib": [10.0, 20.0]})  # fmt: skip
    slots = pl.DataFrame({"host": [host], "gpu": [0], "start_ts": [t0], "end_ts": [t1]})
    phases = slots.with_columns(stable=pl.lit(True))
    curves = pl.DataFrame({"vc": [NASTY_USER] * 2, "jobs": [3, 3], "x": [0.0, 100.0],
                           "p": [0.0, 1.0]})  # fmt: skip
    specs = [
        charts.top_bar(users, "user", "t"),
        charts.cdf(curves, "c", "x", 50.0),
        charts.cdf(curves, "c", "x", 50.0, side_by_side=True),
        charts.bars(users, "user", "idle_slot_gpu_h", "user", "b", "h"),
        charts.minute_cdf(
            pl.DataFrame({"grp": [NASTY_USER], "bucket": [10], "cdf": [1.0]}), "m", ["1"]
        ),
        charts.timeline(samples, gpus, slots, phases, "tl"),
    ]
    for spec in specs:
        assert _expressions(spec) == []
        text = json.dumps({k: v for k, v in spec.items() if k != "datasets"})
        assert "\\u001b" not in text  # control characters escaped in titles and sort orders
        frames = spec["datasets"].values()
        assert all(isinstance(f, pl.DataFrame) for f in frames)
        assert not any("\x1b" in str(v) for f in frames for c in f.columns
                       if f[c].dtype == pl.String for v in f[c].to_list())  # fmt: skip
    bars = specs[0]["datasets"]["bars"]
    assert nasty in bars["user"].to_list()  # shown literally, escaped only where it must be
    assert specs[0]["encoding"]["y"]["sort"] == [nasty, "bob"]
    timeline = specs[-1]
    assert [r["title"]["text"] for r in timeline["vconcat"]] == [
        f"{host}:0",
        f"{host}:1 — NEVER USED",
    ]


def test_readable_shows_hours_utc_minutes_and_running() -> None:
    from datetime import UTC, datetime

    from gpuwaste.dashboard.widgets import readable

    frame = pl.DataFrame(
        {
            "job_id": ["1", "2"],
            "state": ["running", "passed"],
            "end_ts": [None, datetime(2026, 10, 2, 3, 4, 5, tzinfo=UTC)],
            "gpu_s": [7200.0, 5400.0],
            "delay_p50_s": [90.0, 30.0],
            "diagnoses": [None, "gpu_overallocated,slow_start"],
            "is_debug_inferred": [True, None],
            "busy_gpu_h": [1.26, 0.04],
            "mem_used_max_mib": [1024.0, 2048.0],
            "lost_cost": [1.234, None],
            "cause_wait_s": [1620.0, 30.0],
            "metric": ["mean_cpu_util", "pct_fluctuating"],
        }
    )
    out = readable(frame, titles={"state": "Final state"})
    assert out.columns == [
        "Job id", "Final state", "End (UTC)", "GPU hours", "Median delay (min)", "Diagnoses",
        "Inferred debugging", "Busy GPU hours", "GPU memory used, max (MiB)", "Money lost",
        "Waiting of this cause (min)", "Metric",
    ]  # fmt: skip
    # the declarations convert (gpuwaste.columns): 1,620 s is 27 minutes, not "0 h"
    assert out["Waiting of this cause (min)"].to_list() == [27.0, 0.5]
    assert out["Metric"].to_list() == [
        "Mean of jobs' CPU utilization (unweighted)",
        "Jobs fluctuating (%)",
    ]
    assert out["Diagnoses"].to_list() == ["", "gpu overallocated, slow start"]
    assert out["End (UTC)"].to_list() == ["running", "2026-10-02 03:04"]
    assert out["GPU hours"].to_list() == [2.0, 1.5]
    assert out["Median delay (min)"].to_list() == [1.5, 0.5]
    assert out["Inferred debugging"].to_list() == ["yes", ""]  # words, not a check box
    assert out["Busy GPU hours"].to_list() == [1.3, 0.0]  # one decimal for hours
    assert out["Money lost"].to_list() == [1.23, None]  # money to the cent


def test_every_result_column_has_a_title_for_people() -> None:
    from gpuwaste.columns import title
    from gpuwaste.warehouse.schema import all_tables

    names = {c for t in all_tables().values() for c in t.schema}
    assert {n: title(n) for n in names if "_" in title(n) or title(n).startswith("is ")} == {}


def test_csv_file_name_names_the_table_and_the_view() -> None:
    from gpuwaste.dashboard.widgets import csv_name

    assert csv_name("top jobs", Filters()) == "top-jobs_all-clusters.csv"
    f = Filters(cluster="demo", vcs=("nlp", "cv"), start=date(2026, 10, 1), end=date(2026, 10, 3),
                user="../<b>eve</b>", sizes=(">8",))  # fmt: skip
    assert csv_name("top jobs", f) == (
        "top-jobs_cluster-demo_vc-nlp-cv_2026-10-01-to-2026-10-03_user-b-eve-b_size-8.csv"
    )


def test_the_stable_phase_heatmap_colors_span_its_cells() -> None:
    # CloudBrain Table III's cells lie at 84-100 %: on a 0-100 scale they were all one red
    grid = pl.DataFrame(
        {"t_s": [60, 120, 60, 120], "m_gib": [1, 1, 8, 8], "pct": [99.7, 96.0, 90.5, 84.0]}
    )
    spec = charts.heatmap(grid, "t x m")
    assert spec["layer"][0]["encoding"]["color"]["scale"]["domain"] == [84.0, 99.7]
    white = spec["layer"][1]["encoding"]["color"]["condition"]["test"]
    assert white == {"field": "pct", "gt": pytest.approx(84.0 + 0.7 * 15.7)}


def test_the_phase_strip_is_drawn_only_where_it_distinguishes() -> None:
    from datetime import UTC, datetime, timedelta

    t0, h = datetime(2026, 11, 1, tzinfo=UTC), timedelta(hours=1)
    keys = pl.DataFrame({"row": [0, 1], "start_ts": [t0, t0], "end_ts": [t0 + 4 * h, t0 + 4 * h]})
    # row 0: two phases back to back over its whole 4 h; row 1: one phase of 2 h
    phases = pl.DataFrame(
        {"row": [0, 0, 1], "start_ts": [t0, t0 + 2 * h, t0 + h],
         "end_ts": [t0 + 2 * h, t0 + 4 * h, t0 + 3 * h]}
    )  # fmt: skip
    assert charts.distinguishing(phases, keys)["row"].to_list() == [1]


def test_sizes_sort_as_numbers() -> None:
    hist = pl.DataFrame(
        {
            "grp": ["1", "16", "4", "8", "all"] * 2,
            "bucket": [0] * 5 + [100] * 5,
            "gpu_minutes": [1.0] * 10,
            "cdf": [0.5] * 5 + [1.0] * 5,
        }
    )
    spec = charts.minute_cdf(hist, "by size", ("1", "2-4", "5-8", ">8"))
    assert spec["encoding"]["color"]["scale"]["domain"] == ["1", "4", "8", "16", "all"]
    table5 = pl.DataFrame(
        {"vc": ["a"] * 4 + ["b"] * 2, "gpus_requested": ["1", "16", "other", "2", "8", "4"],
         "share_pct": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]}
    )  # fmt: skip
    bars = charts.bars(table5, "gpus_requested", "share_pct", "vc", "Table V", "%")
    assert bars["encoding"]["x"]["sort"] == ["1", "2", "4", "8", "16", "other"]


# --- the Overview's sums over every job from the summaries analyze writes -------------------
def _of_view(jobs: pl.DataFrame, f: Filters) -> pl.DataFrame:
    """The jobs of a view without a period, size or state filter, by polars (its cluster too)."""
    out = _expected(jobs.filter(pl.col("cluster") == f.cluster), f)
    return out.filter(pl.col("gpu_model").is_in(f.models)) if f.models else out


def _check_lost_by_user(con: duckdb.DuckDBPyConnection, jobs: pl.DataFrame, f: Filters) -> None:
    """job_counts, top_users and top_vcs of view `f`, read from lost_by_user, equal the sums over
    every job of the view (polars over job_usage's rows)."""
    assert q._lost_by_user_where(con, f) is not None, f  # the summary answers this view
    want = _of_view(jobs, f)
    counts = q.job_counts(con, f).row(0, named=True)
    assert counts["jobs"] == want.height, f
    assert counts["users"] == want["user"].drop_nulls().n_unique(), f
    assert counts["gpu_h"] == pytest.approx(want["gpu_s"].sum() / 3600, rel=1e-6), f
    lost = pl.col("idle_slot_gpu_s") + pl.col("never_used_gpu_s")
    assert counts["lost_gpu_h"] == pytest.approx(want.select(lost.sum())[0, 0] / 3600, rel=1e-6)
    for who, fn in (("user", q.top_users), ("vc", q.top_vcs)):
        per = (
            want.group_by(who)
            .agg(
                pl.len().alias("jobs"),
                (pl.col("gpu_s").sum() / 3600).alias("gpu_h"),
                (lost.sum() / 3600).alias("lost_gpu_h"),
                # SQL's sum: null where no job is priced
                pl.when(pl.col("lost_cost").is_not_null().any())
                .then(pl.col("lost_cost").sum())
                .alias("lost_cost"),
            )
            .sort(pl.col("lost_gpu_h").round(2), who, descending=[True, False])
        )
        got = fn(con, f)
        n = min(got.height, per.height)
        assert n and got.height == min(per.height, 15 if who == "user" else 50), (f, who)
        assert got[who].to_list() == per[who].head(n).to_list(), (f, who)
        assert got["jobs"].to_list() == per["jobs"].head(n).to_list(), (f, who)
        for column in ("gpu_h", "lost_gpu_h", "lost_cost"):
            for a, b in zip(got[column], per[column].head(n), strict=True):
                assert a == pytest.approx(b, abs=0.006) or a is b is None, (f, who, column)


def _check_waits(con: duckdb.DuckDBPyConnection, overlap: pl.DataFrame, f: Filters) -> None:
    """queue_idle_total of view `f` equals the distinct stretches and the hours of every row
    (its holders' VCs and user; the stretches that overlap its period)."""
    rows = overlap.filter((pl.col("cluster") == f.cluster) & ~pl.col("same_user"))
    if f.vcs:
        rows = rows.filter(pl.col("holder_vc").is_in(f.vcs))
    if f.user:
        rows = rows.filter(pl.col("holder_user") == f.user)
    if f.period_start is not None and f.period_end is not None:
        rows = rows.filter(
            (pl.col("wait_start") < f.period_end) & (pl.col("wait_end") > f.period_start)
        )
    waits = rows.filter(pl.col("blocked_gpu_s") > 0).select("job_id", "attempt").n_unique()
    got = q.queue_idle_total(con, f).row(0, named=True)
    assert got["waits"] == waits, f
    assert got["blocked_gpu_h"] == pytest.approx(rows["blocked_gpu_s"].sum() / 3600, rel=1e-6)


def test_overview_sums_from_the_summaries_on_a_built_warehouse(
    con: duckdb.DuckDBPyConnection, built: Built
) -> None:
    """The builder writes lost_by_user and waits_behind_idle by their SQL files."""
    jobs = Warehouse(built.data_dir).read("job_usage")  # with the costs, null, as stored
    model = jobs["gpu_model"][0]
    for f in (
        Filters(cluster="demo"),
        Filters(cluster="demo", vcs=("nlp",)),
        Filters(cluster="demo", vcs=("nlp", "speech"), models=(model,)),
        Filters(cluster="demo", user=NASTY_USER),
        Filters(cluster="demo", vcs=("vision",), user=jobs["user"][5]),
    ):
        _check_lost_by_user(con, jobs, f)
    overlap = Warehouse(built.data_dir).read("queue_idle_overlap")
    assert overlap.filter(pl.col("blocked_gpu_s") > 0).height
    for f in (Filters(cluster="demo"), Filters(cluster="demo", vcs=("speech",))):
        _check_waits(con, overlap, f)
    # several VCs: a stretch behind holders of two of them counts once, from every row
    _check_waits(con, overlap, Filters(cluster="demo", vcs=("nlp", "speech")))


def test_overview_sums_from_the_summaries_on_the_demo(demo_warehouse: Path) -> None:
    """`gpuwaste analyze` on the bundled sample writes them; the Overview's figures from them
    equal those over every job, on both clusters."""
    wh = Warehouse(demo_warehouse)
    jobs, overlap = wh.read("job_usage"), wh.read("queue_idle_overlap")
    c = read_only_connection(demo_warehouse)
    try:
        for cluster in jobs["cluster"].unique().sort():
            here = jobs.filter(pl.col("cluster") == cluster)
            vc, model = here["vc"][0], here["gpu_model"][0]
            for f in (
                Filters(cluster=cluster),
                Filters(cluster=cluster, vcs=(vc,), models=(model,)),
                Filters(cluster=cluster, user=here["user"][0]),
            ):
                _check_lost_by_user(c, jobs, f)
            for f in (Filters(cluster=cluster), Filters(cluster=cluster, vcs=(vc,))):
                _check_waits(c, overlap, f)
            # a user (as the idle GPUs' holder) or a period: waits_behind_idle, per holder's
            # VC over all time, cannot answer; every stretch is read
            held = overlap.filter((pl.col("cluster") == cluster) & (pl.col("blocked_gpu_s") > 0))
            if held.height:
                holder = held.sort("blocked_gpu_s")["holder_user"][-1]
                day = held.sort("blocked_gpu_s")["wait_start"][-1].date()
                for f in (
                    Filters(cluster=cluster, user=holder),
                    Filters(cluster=cluster, start=day, end=day),
                ):
                    _check_waits(c, overlap, f)
    finally:
        c.close()


def test_views_the_summaries_cannot_answer_read_every_job(
    con: duckdb.DuckDBPyConnection, built: Built
) -> None:
    """A period, size or state filter, or no cluster, reads job_usage; so does a cluster whose
    analyze did not write lost_by_user (a warehouse analyzed before it existed)."""
    for f in (
        Filters(cluster="demo", start=date(2026, 10, 3), end=date(2026, 10, 4)),
        Filters(cluster="demo", sizes=("1",)),
        Filters(cluster="demo", states=("killed",)),
        Filters(),
        Filters(cluster="elsewhere"),
    ):
        assert q._lost_by_user_where(con, f) is None, f
    assert not q._written(con, "waits_behind_idle", "elsewhere")


def _hand_job_usage(rows: str) -> duckdb.DuckDBPyConnection:
    """A DuckDB with the variable cluster 'c' and a job_usage of hand-written `rows` (cluster,
    vc, gpu_model, user, gpu_s, idle_slot_gpu_s, never_used_gpu_s, gpu_cost, lost_cost,
    start_ts, end_ts)."""
    from gpuwaste.analyses.sqlfiles import set_variables

    c = duckdb.connect()
    set_variables(c, {"cluster": "c"})
    c.execute(
        'create table job_usage as select cluster, vc, gpu_model, "user", gpu_s, '
        "idle_slot_gpu_s, never_used_gpu_s, gpu_cost::DOUBLE AS gpu_cost, "
        "lost_cost::DOUBLE AS lost_cost, start_ts::TIMESTAMP AS start_ts, "
        f"end_ts::TIMESTAMP AS end_ts from (values {rows}) "
        't(cluster, vc, gpu_model, "user", gpu_s, idle_slot_gpu_s, never_used_gpu_s, '
        "gpu_cost, lost_cost, start_ts, end_ts)"
    )
    return c


def test_lost_by_user_and_waits_behind_idle_by_hand() -> None:
    """Their SQL files over a few hand-written rows."""
    from gpuwaste.analyses.registry import BY_NAME
    from gpuwaste.analyses.sqlfiles import set_variables

    c = _hand_job_usage(
        "('c', 'a', 'm1', 'u1', 3600.0, 1800.0, 0.0, 2.0, 1.0, null, null), "
        "('c', 'a', 'm2', 'u1', 7200.0, 0.0, 3600.0, null, null, null, null), "
        "('c', 'b', 'm1', 'u2', 3600.0, 0.0, 0.0, 1.0, 0.0, null, null), "
        "('x', 'a', 'm1', 'u1', 9999.0, 9999.0, 0.0, 5.0, 5.0, null, null)"
    )
    try:
        rows = {
            (vc, m, u): (jobs, gpu_h, lost, cost)
            for vc, m, u, jobs, gpu_h, lost, cost in BY_NAME["lost_by_user"]
            .compute(c)
            .select("vc", "gpu_model", "user", "jobs", "gpu_h", "lost_gpu_h", "cost")
            .iter_rows()
        }
        assert rows[(ALL_VCS, ALL_MODELS, "u1")] == (2, 3.0, 1.5, 2.0)
        assert rows[("a", "m2", "u1")] == (1, 2.0, 1.0, None)  # nothing priced: no money
        assert rows[("b", ALL_MODELS, "u2")] == (1, 1.0, 0.0, 1.0)
        assert len(rows) == 2 * 3 + 2 * 2  # u1: a, (all) x m1, m2, (all); u2: b, (all) x m1, (all)
        c.execute(
            "create table queue_idle_overlap as select * from (values "
            "('c', 'w1', 0, 'a', 3600.0, false), ('c', 'w1', 0, 'b', 1800.0, false), "
            "('c', 'w2', 0, 'a', 0.0, false), ('c', 'w3', 1, 'b', 7200.0, true), "
            "('x', 'w9', 0, 'a', 3600.0, false)) "
            "t(cluster, job_id, attempt, holder_vc, blocked_gpu_s, same_user)"
        )
        waits = BY_NAME["waits_behind_idle"].compute(c).sort("vc")
        assert waits.select("vc", "gpu_model", "blocked_waits", "blocked_wait_gpu_h").rows() == [
            (ALL_VCS, ALL_MODELS, 1, 1.5),  # w1 once, though behind both VCs; w3 is its own
            ("a", ALL_MODELS, 1, 1.0),
            ("b", ALL_MODELS, 1, 0.5),
        ]
        set_variables(c, {"cluster": "nothing waited"})
        assert BY_NAME["waits_behind_idle"].compute(c).rows() == [(ALL_VCS, ALL_MODELS, 0, 0.0)]
    finally:
        c.close()


def test_jobs_without_a_vc_are_none_in_both_ways_of_reading() -> None:
    """Top VCs label the jobs without a VC '(none)', from lost_by_user and from every job."""
    from gpuwaste.analyses.registry import BY_NAME

    c = _hand_job_usage(
        "('c', 'a', 'm1', 'u1', 3600.0, 1800.0, 0.0, null, null, "
        "'2026-10-03 01:00', '2026-10-03 02:00'), "
        "('c', null, 'm1', 'u2', 7200.0, 0.0, 7200.0, null, null, "
        "'2026-10-03 03:00', '2026-10-03 05:00')"
    )
    try:
        c.register("lost_rows", BY_NAME["lost_by_user"].compute(c))
        c.execute("create table lost_by_user as select 'c' as cluster, * from lost_rows")
        whole = Filters(cluster="c")
        assert q._lost_by_user_where(c, whole) is not None  # read from the summary
        day = Filters(cluster="c", start=date(2026, 10, 3), end=date(2026, 10, 3))
        assert q._lost_by_user_where(c, day) is None  # a period: read from every job
        for f in (whole, day):
            got = q.top_vcs(c, f).select("vc", "jobs", "lost_gpu_h").rows()
            assert got == [("(none)", 1, 2.0), ("a", 1, 0.5)], f
    finally:
        c.close()
