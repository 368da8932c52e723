"""The SQL page: a `?sql=` link fills the box and waits for Run; the sidebar's filters, which a
free query cannot honor, are not offered there (and are still set on the other pages after)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from harness.result_warehouse import Built, build_result_warehouse
from streamlit.testing.v1 import AppTest

from gpuwaste.config import DATA_DIR_ENV
from tests.test_dashboard_app import APP, TIMEOUT, _open


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return build_result_warehouse(tmp_path_factory.mktemp("wh") / "data", n_jobs=200, seed=3)


@pytest.fixture
def app(warehouse: Built, monkeypatch: pytest.MonkeyPatch) -> Iterator[AppTest]:
    monkeypatch.setenv(DATA_DIR_ENV, str(warehouse.data_dir))
    yield AppTest.from_file(APP, default_timeout=TIMEOUT)


def _results(at: AppTest) -> list[object]:
    """The query results shown (every dataframe but the table list)."""
    return [d.value for d in at.dataframe if "table" not in d.value.columns]


def test_a_sql_link_fills_the_box_and_waits_for_run(app: AppTest) -> None:
    at = _open(app, "sql", sql="SELECT count(*) AS n FROM job_usage")
    assert at.text_area(key="sql").value == "SELECT count(*) AS n FROM job_usage"
    assert _results(at) == [] and "Press Run" in str(at.info[0].value)
    at.button(key="run").click().run()
    (out,) = _results(at)
    assert out["n"].to_list() == [200]  # type: ignore[attr-defined]
    # a CSV download under the table list and under the result
    assert [b.proto.label for b in at.get("download_button")] == ["Download CSV"] * 2
    # editing the box does not run it either; the last result stays, marked as older
    at.text_area(key="sql").set_value("SELECT 1 AS one").run()
    (out,) = _results(at)
    assert "n" in out.columns  # type: ignore[attr-defined]
    assert any("press Run" in str(c.value) for c in at.caption)
    at.button(key="run").click().run()
    (out,) = _results(at)
    assert out["one"].to_list() == [1]  # type: ignore[attr-defined]


def test_the_filters_are_not_offered_on_the_sql_page(app: AppTest, warehouse: Built) -> None:
    vc = warehouse.vcs[1]
    at = _open(app, None, vc=vc)
    assert at.sidebar.multiselect(key="vc").value == [vc]
    at.switch_page("views/sql.py").run()
    assert not at.sidebar.selectbox and not at.sidebar.multiselect
    assert "do not apply to SQL" in str(at.sidebar.caption[0].value)
    at.switch_page("views/overview.py").run()
    assert at.sidebar.multiselect(key="vc").value == [vc]  # kept for the other pages
    # no complaint about the kept filters (the built warehouse was never analyzed, so the
    # Overview's freshness warning is expected and is not about them)
    others = [str(w.value) for w in at.warning if "older than its data" not in str(w.value)]
    assert not at.exception and not others, others
