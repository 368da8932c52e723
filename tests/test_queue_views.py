"""The queue analyses where people read them, on the session's demo warehouse: the dashboard's
"Queue and failures" page and `report --by user`'s "GPU hours others waited while you idled"."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import polars as pl
import pytest
from streamlit.testing.v1 import AppTest

import gpuwaste.dashboard
from gpuwaste.analyses.waste_by import waste_by
from gpuwaste.config import DATA_DIR_ENV, Settings
from gpuwaste.dashboard.filters import Filters
from gpuwaste.dashboard.queries import queue_idle_holders, queue_idle_total
from gpuwaste.warehouse.readonly import read_only_connection

APP = str(Path(gpuwaste.dashboard.__file__).parent / "app.py")


@pytest.mark.parametrize("cluster", ["demo", "philly-sample"])
def test_queue_page_draws_table_2_and_the_waits_behind_idle_gpus(
    demo_warehouse: Path, monkeypatch: pytest.MonkeyPatch, cluster: str
) -> None:
    monkeypatch.setenv(DATA_DIR_ENV, str(demo_warehouse))
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["cluster"] = cluster
    at.run()
    at.switch_page("views/queue.py").run()
    assert not at.exception, [e.value for e in at.exception]
    # it opens on Table 2 alone: the other sections' elements are not built
    (control,) = at.segmented_control
    assert (control.key, control.value) == ("section", "Why jobs waited")
    assert list(control.options) == [
        "Why jobs waited",
        "Waits behind idle GPUs",
        "Why jobs failed",
    ]
    assert [h.value for h in at.subheader] == ["Why jobs waited (Philly Table 2)"]
    (table2,) = at.dataframe
    assert list(table2.value.columns)[:2] == ["VC", "Job size (GPUs)"]
    # the shares by cause are bars in the table's cells; its chart is not built until asked for
    shares = json.loads(table2.proto.columns)
    assert {shares[c]["type_config"]["type"] for c in ("Occurrences (%)", "Waiting time (%)")} == {
        "progress"
    }
    assert _chart_titles(at) == []
    assert [m.label for m in at.metric] == ["Waits", "Hours waited", "Out-of-order starts"]
    # no quotas are configured for the demo: the page says fair-share was not judged
    assert any("Fair-share is not judged" in str(i.value) for i in at.info)
    (chart,) = at.expander
    assert chart.label == "Waiting time by cause and job size, as a chart"
    at.query_params["chart"] = "true"  # the expander opened (its link)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert _chart_titles(at) == ["Waiting time by cause and job size"]
    # one click to the waits behind idle GPUs: their chart and their holders, nothing of Table 2
    control.set_value("Waits behind idle GPUs").run()
    assert not at.exception, [e.value for e in at.exception]
    assert [h.value for h in at.subheader] == ["GPU hours waited behind idle GPUs"]
    assert _chart_titles(at) == ["GPU hours waited behind idle GPUs, by the idle GPUs' VC"]
    assert [t.value.columns[0] for t in at.dataframe] == ["User"] and not at.metric
    for page in ("overview", "waste"):  # one figure each
        at.switch_page(f"views/{page}.py").run()
        assert not at.exception, [e.value for e in at.exception]
        shown = [m for m in at.metric if m.label == "GPU hours jobs waited behind idle GPUs"]
        assert len(shown) == 1, page
        hours = shown[0].value.replace(",", "")
        assert hours.endswith(" GPU h") and float(hours.removesuffix(" GPU h")) > 0, page


def _chart_titles(at: AppTest) -> list[str]:
    return [json.loads(e.proto.spec)["title"]["text"] for e in at.get("vega_lite_chart")]


def test_a_link_opens_its_section_and_an_unknown_one_falls_back_with_a_warning(
    demo_warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DATA_DIR_ENV, str(demo_warehouse))
    for section, heading in [("Why jobs failed", "Why jobs failed (Philly Table 7)"),
                             ("nope", "Why jobs waited (Philly Table 2)")]:  # fmt: skip
        at = AppTest.from_file(APP, default_timeout=60)
        at.query_params["cluster"] = "demo"
        at.query_params["section"] = section
        at.run()
        at.switch_page("views/queue.py").run()
        assert not at.exception, [e.value for e in at.exception]
        assert [h.value for h in at.subheader] == [heading]
        warned = [str(w.value) for w in at.warning]
        if section == "nope":
            assert warned == [
                "The link's section=`nope` is not a choice here: showing `the section Why jobs "
                "waited` instead."
            ]
        else:
            assert warned == [] and not at.get("vega_lite_chart")


def test_report_by_user_has_the_hours_others_waited_while_they_idled(
    demo_warehouse: Path,
) -> None:
    by_user = waste_by(Settings(data_dir=demo_warehouse), "user", cluster="philly-sample")
    con = duckdb.connect()
    want = dict(
        con.execute(
            "select holder_user, sum(blocked_gpu_s) / 3600 from read_parquet(?) "
            "where not same_user group by 1",
            [str(demo_warehouse / "parquet/queue_idle_overlap/cluster=philly-sample/*.parquet")],
        ).fetchall()
    )
    assert want and max(want.values()) > 0
    have = {
        r["user"]: r["others_waited_gpu_h"]
        for r in by_user.iter_rows(named=True)
        if r["others_waited_gpu_h"] is not None
    }
    assert have == pytest.approx(want)
    assert "others_waited_gpu_h" not in waste_by(Settings(data_dir=demo_warehouse), "model").columns


@pytest.mark.parametrize("cluster", ["demo", "philly-sample"])
def test_the_holders_table_per_user_is_report_by_users(demo_warehouse: Path, cluster: str) -> None:
    """The page's holders, summed per user, give `report --by user`'s GPU hours others waited
    behind the user's idle GPUs and those the user waited behind their own."""
    con = read_only_connection(demo_warehouse)
    try:
        holders = queue_idle_holders(con, Filters(cluster=cluster), limit=10_000)
    finally:
        con.close()
    have = holders.group_by("user").agg(pl.col("blocked_gpu_h", "own_blocked_gpu_h").sum())
    by_user = waste_by(Settings(data_dir=demo_warehouse), "user", cluster=cluster)
    want = by_user.select(
        "user",
        pl.col("others_waited_gpu_h").fill_null(0).alias("blocked_gpu_h"),
        pl.col("own_blocked_gpu_h").fill_null(0),
    ).filter((pl.col("blocked_gpu_h") > 0) | (pl.col("own_blocked_gpu_h") > 0))
    assert want["own_blocked_gpu_h"].sum() > 0 and want["blocked_gpu_h"].sum() > 0
    got = have.filter((pl.col("blocked_gpu_h") > 0) | (pl.col("own_blocked_gpu_h") > 0))
    got_by, want_by = ({u: (a, b) for u, a, b in t.rows()} for t in (got, want))
    assert got_by.keys() == want_by.keys()
    for user, figures in want_by.items():
        assert got_by[user] == pytest.approx(figures), user


@pytest.mark.parametrize("cluster", ["demo", "philly-sample"])
def test_the_holders_waits_count_each_wait_once(demo_warehouse: Path, cluster: str) -> None:
    """queue_idle_holders counts a holder's rows as its waits (one row per wait and holder, the
    table's key): the same as counting the distinct waits, on what analyze wrote."""
    con = read_only_connection(demo_warehouse)
    try:
        have = queue_idle_holders(con, Filters(cluster=cluster), limit=10_000)
        want = con.execute(
            "select holder_user, holder_vc, count(distinct (job_id, attempt)) filter "
            "(where blocked_gpu_s > 0) from queue_idle_overlap where cluster = ? and not "
            "same_user group by all",
            [cluster],
        ).fetchall()
    finally:
        con.close()
    assert want and sorted(have.select("user", "vc", "waits_behind").rows()) == sorted(want)


def test_the_waits_behind_idle_gpus_follow_the_holders_vc(demo_warehouse: Path) -> None:
    """The VC filter picks the VC of the idle GPUs (holder_vc), not the waiting job's."""
    con = read_only_connection(demo_warehouse)
    try:
        vc, other = con.execute(
            "select holder_vc, count(*) filter (where vc <> holder_vc) from queue_idle_overlap "
            "where cluster = 'demo' and not same_user group by 1 order by 2 desc limit 1"
        ).fetchall()[0]
        have = queue_idle_total(con, Filters(cluster="demo", vcs=(vc,))).row(0)
        want = con.execute(
            "select count(distinct (job_id, attempt)) filter (where blocked_gpu_s > 0), "
            "coalesce(sum(blocked_gpu_s), 0) / 3600 "
            "from queue_idle_overlap where cluster = 'demo' and not same_user and holder_vc = ?",
            [vc],
        ).fetchall()[0]
    finally:
        con.close()
    assert other > 0 and want[0] > 0
    assert have == pytest.approx(want)
