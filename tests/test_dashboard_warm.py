"""The server's start-up warm-up (`data.warm`): after it, the first visit of the pages it warms
runs no query (each one's result is already cached), so the first visitor after a start does not
wait for them (bench/RESULTS.md, "Dashboard on 1 M jobs")."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import pytest
import streamlit as st
from harness.result_warehouse import Built, build_result_warehouse
from streamlit.testing.v1 import AppTest

from gpuwaste.config import DATA_DIR_ENV
from gpuwaste.dashboard import data
from tests.test_dashboard_app import APP, TIMEOUT


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return build_result_warehouse(tmp_path_factory.mktemp("wh") / "data", n_jobs=300, seed=17)


@pytest.fixture(autouse=True)
def _no_quiet_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """The warm-up waits `quiet_s` after a page run before another page's queries: not here,
    where the pages are run before or after it on purpose."""
    monkeypatch.setattr(data.PAGE_RUNS, "quiet_s", 0.0)


def _counted(ran: list[str], fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)  # data.fetch finds a query by its module and name
    def run(*args: Any, **kwargs: Any) -> Any:
        ran.append(fn.__name__)
        return fn(*args, **kwargs)

    return run


def _count_queries(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every query function of the dashboard's query modules, counted by name as it runs."""
    ran: list[str] = []
    for module in data.QUERY_MODULES.values():
        for name, fn in list(vars(module).items()):
            if callable(fn) and getattr(fn, "__module__", None) == module.__name__:
                monkeypatch.setattr(module, name, _counted(ran, fn))
    return ran


@pytest.mark.parametrize(
    ("page", "warmed"), [(None, True), ("queue", True), ("policies", True), ("cdfs", False)]
)
def test_after_the_warm_up_the_warmed_pages_run_no_query(
    warehouse: Built, monkeypatch: pytest.MonkeyPatch, page: str | None, warmed: bool
) -> None:
    monkeypatch.setenv(DATA_DIR_ENV, str(warehouse.data_dir))
    st.cache_data.clear()
    st.cache_resource.clear()
    data.warm()
    ran = _count_queries(monkeypatch)
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    at.run()  # the default page: the Overview
    if page:
        at.switch_page(f"views/{page}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    if warmed:
        assert ran == []
    else:  # the check can fail: a page the warm-up leaves out runs its queries
        assert "job_cdf" in ran


def test_the_warm_up_waits_while_a_page_runs(
    warehouse: Built, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a visitor's page runs, the warm-up fills what every page needs and the Overview's
    (the page a first visitor lands on, which it shares), then runs no query for another page
    (it would share the CPU with the page running, or with the browser drawing it); once no page
    has run for `quiet_s`, it warms the rest."""
    import threading
    import time

    monkeypatch.setenv(DATA_DIR_ENV, str(warehouse.data_dir))
    st.cache_data.clear()
    st.cache_resource.clear()
    ran = _count_queries(monkeypatch)
    monkeypatch.setattr(data.PAGE_RUNS, "quiet_s", 0.5)
    warm = threading.Thread(target=data.warm)
    with data.PAGE_RUNS.running():
        warm.start()
        deadline = time.monotonic() + 120
        while data.PAGE_RUNS.waiting == 0 and warm.is_alive() and time.monotonic() < deadline:
            warm.join(timeout=0.01)
        assert warm.is_alive() and data.PAGE_RUNS.waiting == 1
        assert {"filter_options", "top_jobs", "queue_idle_total"} <= set(ran)
        assert not {"queue_idle_holders", "failure_attempts"} & set(ran)
    ended = time.monotonic()
    warm.join(timeout=0.2)  # within `quiet_s` of the page run's end: still waiting
    assert warm.is_alive() and not {"queue_idle_holders", "failure_attempts"} & set(ran)
    warm.join(timeout=120)
    assert time.monotonic() - ended >= 0.45
    assert not warm.is_alive()
    assert {"queue_idle_holders", "failure_attempts"} <= set(ran)


def test_after_the_overviews_queries_the_warm_up_waits_for_a_first_visitor(
    warehouse: Built, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no page run yet (a just-started server whose first visitor's browser is loading the
    app), the warm-up fills the Overview's queries, then waits `quiet_s` before another page's."""
    import threading
    import time

    monkeypatch.setenv(DATA_DIR_ENV, str(warehouse.data_dir))
    monkeypatch.setattr(data, "PAGE_RUNS", data.PageRuns(quiet_s=0.5))  # no run ended yet
    st.cache_data.clear()
    st.cache_resource.clear()
    ran = _count_queries(monkeypatch)
    warm = threading.Thread(target=data.warm)
    warm.start()
    deadline = time.monotonic() + 120
    while data.PAGE_RUNS.waiting == 0 and warm.is_alive() and time.monotonic() < deadline:
        warm.join(timeout=0.01)
    waited = time.monotonic()
    assert warm.is_alive() and {"top_jobs", "queue_idle_total"} <= set(ran)
    assert not {"queue_idle_holders", "failure_attempts"} & set(ran)
    warm.join(timeout=120)
    assert not warm.is_alive() and {"queue_idle_holders", "failure_attempts"} <= set(ran)
    assert time.monotonic() - waited >= 0.3
