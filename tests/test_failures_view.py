"""Table 7 where people read it: the failures section of the dashboard's "Queue and failures"
page on the session's demo warehouse, with the drill-down to each failed attempt."""

from __future__ import annotations

from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

import gpuwaste.dashboard
from gpuwaste.config import DATA_DIR_ENV
from gpuwaste.dashboard import queries
from gpuwaste.warehouse.store import Warehouse

APP = str(Path(gpuwaste.dashboard.__file__).parent / "app.py")


def test_table_7_and_the_attempts_of_a_reason(
    demo_warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    want = Warehouse(demo_warehouse).read("failure_attempts", "demo")
    assert want.height > 0
    monkeypatch.setenv(DATA_DIR_ENV, str(demo_warehouse))
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["cluster"] = "demo"
    at.run()
    at.switch_page("views/queue.py").run()
    assert not at.exception, [e.value for e in at.exception]
    at.segmented_control(key="section").set_value("Why jobs failed").run()  # Table 7's section
    assert not at.exception, [e.value for e in at.exception]
    tables = [t.value for t in at.dataframe]
    table7 = next(t for t in tables if "Failure reason" in t.columns)
    assert {"Trials", "RTF p50 (min)", "Demand >4 GPUs", "Repeats per job"} <= set(table7.columns)
    every = table7[(table7["VC"] == "(all)") & (table7["Failure reason"] == "all")]
    assert int(every["Trials"].iloc[0]) == want.height
    reason = want.group_by("reason").len().sort("len", descending=True)["reason"][0]
    at.selectbox(key="failure_reason").select(reason).run()
    assert not at.exception, [e.value for e in at.exception]
    attempts = next(t for t in (t.value for t in at.dataframe) if "Matched log line" in t.columns)
    assert len(attempts) == want.filter(want["reason"] == reason).height
    assert set(attempts["Failure reason"]) == {reason}
    # the demo has no job logs: the page says where the lines come from
    assert any("gpuwaste ingest logs" in str(i.value) for i in at.info)
    assert not [c for c in at.caption if "attempts that burned the most" in c.value]


def test_a_drill_down_cut_short_says_so(
    demo_warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shown = 3
    assert Warehouse(demo_warehouse).read("failure_attempts", "demo").height > shown
    monkeypatch.setattr(queries, "FAILED_ATTEMPTS_SHOWN", shown)
    monkeypatch.setenv(DATA_DIR_ENV, str(demo_warehouse))
    st.cache_data.clear()  # the attempts cached in full by an earlier test, and these after
    try:
        at = AppTest.from_file(APP, default_timeout=60)
        at.query_params["cluster"] = "demo"
        at.query_params["section"] = "Why jobs failed"
        at.run()
        at.switch_page("views/queue.py").run()
    finally:
        st.cache_data.clear()
    assert not at.exception, [e.value for e in at.exception]
    attempts = next(t for t in (t.value for t in at.dataframe) if "Matched log line" in t.columns)
    assert len(attempts) == shown
    assert [c.value for c in at.caption if "attempts that burned the most" in c.value] == [
        "The 3 attempts that burned the most GPU time; narrow the view (period, user, VC) or "
        "query `failure_attempts` on the SQL page for every one."
    ]


def test_the_period_filter_gives_tables_2_and_7_of_report_since(
    demo_warehouse: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the sidebar's period (the demo's last day, through the end of its data), the page's
    figure tiles, Table 2 and Table 7 are `gpuwaste report --since` that day's, and not the
    whole window's as analyze stored them."""
    from datetime import UTC, datetime

    from gpuwaste.analyses.report import report
    from gpuwaste.config import Settings

    day = "2026-11-01"  # the demo: jobs from 10-31 12:00 to 11-01 12:00 UTC
    since = datetime.fromisoformat(day).replace(tzinfo=UTC)
    settings = Settings(data_dir=demo_warehouse)
    causes = report(settings, "queue_cause_summary", cluster="demo", vc="(all)", since=since)
    every = causes.filter(causes["size_class"] == "all").row(0, named=True)
    reasons = report(settings, "failure_reasons", cluster="demo", vc="(all)", since=since)
    trials = reasons.filter(reasons["reason"] == "all")["trials"][0]
    stored = report(settings, "failure_reasons", cluster="demo", vc="(all)")
    assert 0 < trials < stored.filter(stored["reason"] == "all")["trials"][0]
    monkeypatch.setenv(DATA_DIR_ENV, str(demo_warehouse))

    def page(section: str) -> AppTest:
        at = AppTest.from_file(APP, default_timeout=60)
        at.query_params.update(cluster="demo", period=[day, day], section=section)
        at.run()
        at.switch_page("views/queue.py").run()
        assert not at.exception, [e.value for e in at.exception]
        return at

    waits = page("Why jobs waited")
    tiles = {m.label: m.value for m in waits.metric}
    assert tiles["Waits"] == f"{every['waits']:,} waits"
    assert tiles["Out-of-order starts"] == f"{every['out_of_order_pct']:.1f}%"
    table2 = next(t.value for t in waits.dataframe if "Cause" in t.value.columns)
    assert int(table2["Waits"].sum()) == causes["stretches"].sum()
    table7 = next(t.value for t in page("Why jobs failed").dataframe
                  if "Failure reason" in t.value.columns)  # fmt: skip
    assert int(table7[table7["Failure reason"] == "all"]["Trials"].iloc[0]) == trials
