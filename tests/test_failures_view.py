"""Table 7 where people read it: the failures section of the dashboard's "Queue and failures"
page on the session's demo warehouse, with the drill-down to each failed attempt."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

import gpuwaste.dashboard
from gpuwaste.config import DATA_DIR_ENV
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
