"""Tables 2 and 7 of a period and a user (the dashboard's filters): recomputed by their own SQL
over the stored waits and failed attempts dated in the period (gpuwaste.analyses.period_summary),
as `gpuwaste report --since` computes them, on a warehouse of hand-written rows whose figures are
worked out by hand below.

Cluster c, GPU model A100, VCs a and b. The waits (queue_causes; dated by their end, the start
they waited for):
  j1 u1 a 1 GPU   10-01 10:00 -> 10-01 11:00  3600 s capacity
  j2 u2 a 4 GPUs  10-02 09:00 -> 10-02 10:00  3600 s: 2400 fragmentation + 1200 other
  j3 u1 b 1 GPU   10-02 23:00 -> 10-03 01:00  7200 s capacity, out of order (ends on 10-03)
  j4 u2 b 1 GPU   10-02 12:00, no wait (cause null), out of order
The failed attempts (failure_attempts; dated by their start):
  j1 u1 a 1 GPU  attempt 0 started 10-01 12:00, 600 s, GPU OOM (the job ran on until 10-02)
  j2 u2 a 4 GPUs attempt 0 started 10-02 08:00, 1200 s, GPU OOM
  j3 u1 b 1 GPU  attempt 0 started 10-02 20:00, 3000 s, time limit
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, date, datetime
from pathlib import Path

import duckdb
import polars as pl
import pytest

from gpuwaste.analyses.period_summary import EVENT_SUMMARIES, event_summary
from gpuwaste.analyses.report import report
from gpuwaste.config import Settings
from gpuwaste.dashboard import queries as q
from gpuwaste.dashboard.filters import Filters
from gpuwaste.warehouse.readonly import read_only_connection
from gpuwaste.warehouse.results import ALL_MODELS, ALL_VCS
from gpuwaste.warehouse.store import Warehouse


def _t(day: int, hour: int) -> datetime:
    return datetime(2026, 10, day, hour, tzinfo=UTC)


WAITS = pl.DataFrame(
    {
        "job_id": ["j1", "j2", "j3", "j4"],
        "attempt": [0, 0, 0, 0],
        "user": ["u1", "u2", "u1", "u2"],
        "vc": ["a", "a", "b", "b"],
        "gpu_model": ["A100"] * 4,
        "size_class": ["1", "2-4", "1", "1"],
        "gpus": [1.0, 4.0, 1.0, 1.0],
        "wait_start": [_t(1, 10), _t(2, 9), _t(2, 23), _t(2, 12)],
        "wait_end": [_t(1, 11), _t(2, 10), _t(3, 1), _t(2, 12)],
        "wait_s": [3600.0, 3600.0, 7200.0, 0.0],
        "fair_share_s": [0.0] * 4,
        "fragmentation_s": [0.0, 2400.0, 0.0, 0.0],
        "capacity_s": [3600.0, 0.0, 7200.0, 0.0],
        "other_s": [0.0, 1200.0, 0.0, 0.0],
        "cause": ["capacity", "fragmentation", "capacity", None],
        "out_of_order": [False, False, True, True],
    }
)
FAILED = pl.DataFrame(
    {
        "job_id": ["j1", "j2", "j3"],
        "attempt": [0, 0, 0],
        "user": ["u1", "u2", "u1"],
        "vc": ["a", "a", "b"],
        "gpu_model": ["A100"] * 3,
        "start_ts": [_t(1, 12), _t(2, 8), _t(2, 20)],
        "end_ts": [_t(1, 12).replace(minute=10), _t(2, 8).replace(minute=20), _t(2, 20)],
        "gpus": [1, 4, 1],
        "runtime_s": [600.0, 1200.0, 3000.0],
        "gpu_s": [600.0, 4800.0, 3000.0],
        "reason": ["GPU OOM", "GPU OOM", "time limit"],
        "sources": ["U", "U", "U"],
        "origin": ["log", "log", "scheduler"],
    }
)
JOBS = pl.DataFrame(
    {
        "job_id": ["j1", "j2", "j3"],
        "user": ["u1", "u2", "u1"],
        "vc": ["a", "a", "b"],
        "gpu_model": ["A100"] * 3,
        "size_class": ["1", "2-4", "1"],
        "gpus": [1, 4, 1],
        "state": ["passed", "unsuccessful", "killed"],
        "start_ts": [_t(1, 11), _t(2, 8), _t(2, 20)],
        "end_ts": [_t(2, 6), _t(2, 8).replace(minute=20), _t(2, 21)],
    }
)
DAY2 = Filters(cluster="c", start=date(2026, 10, 2), end=date(2026, 10, 2))


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The rows above, and the two summaries over all of them as analyze stores them (their
    own SQL, over every event)."""
    root = tmp_path_factory.mktemp("period") / "data"
    wh = Warehouse(root)
    wh.replace_file("queue_causes", "c", "hand", WAITS)
    wh.replace_file("failure_attempts", "c", "hand", FAILED)
    wh.replace_file("job_usage", "c", "hand", JOBS)
    con = read_only_connection(root)
    try:
        for name in ("queue_cause_summary", "failure_reasons"):
            wh.replace_file(name, "c", "hand", event_summary(con, name, "c", None))
    finally:
        con.close()
    return root


@pytest.fixture
def con(data_dir: Path) -> duckdb.DuckDBPyConnection:
    return read_only_connection(data_dir)


def _row(df: pl.DataFrame, **where: str) -> dict[str, object]:
    """The one row of `df` where each column equals its value (VC and model '(all)' unless
    given)."""
    want = {"vc": ALL_VCS, "gpu_model": ALL_MODELS, **where}
    (row,) = df.filter(*(pl.col(c) == v for c, v in want.items() if c in df.columns)).rows(
        named=True
    )
    return row


def test_event_summaries_are_derived_from_the_registry() -> None:
    assert set(EVENT_SUMMARIES) == {"queue_cause_summary", "failure_reasons", "waits_behind_idle"}


def test_table_2_of_a_period_and_of_a_user(con: duckdb.DuckDBPyConnection) -> None:
    """Day 10-02 keeps j2 and j4 (waits that ended that day): not j1 (10-01) nor j3, which began
    waiting on 10-02 but started on 10-03."""
    day = q.summary(con, DAY2, "queue_cause_summary")
    every = _row(day, size_class="all", cause="fragmentation")
    assert (every["decisions"], every["waits"], every["wait_s"]) == (2, 1, 3600.0)
    assert every["out_of_order_pct"] == pytest.approx(50.0)  # j4 of j2, j4
    assert (every["stretches"], every["stretches_pct"]) == (1, 100.0)
    assert every["cause_wait_s"] == 2400.0 and every["wait_pct"] == pytest.approx(200 / 3)
    other = _row(day, size_class="all", cause="other")
    assert (other["stretches"], other["cause_wait_s"]) == (0, 1200.0)
    assert _row(day, size_class="all", cause="capacity")["stretches"] == 0
    vc_b = q.summary(con, replace(DAY2, vcs=("b",)), "queue_cause_summary")
    assert _row(vc_b, vc="b", size_class="1", cause="capacity")["decisions"] == 1  # j4 alone
    # the whole data, as analyze stored it: j1, j3 capacity, j2 fragmentation
    whole = q.summary(con, Filters(cluster="c"), "queue_cause_summary")
    every = _row(whole, size_class="all", cause="capacity")
    assert (every["decisions"], every["waits"], every["wait_s"]) == (4, 3, 14400.0)
    assert (every["stretches"], every["cause_wait_s"]) == (2, 10800.0)
    # a user: the waits of their jobs (u1: j1, j3), over all time and within the period
    mine = _row(q.summary(con, Filters(cluster="c", user="u1"), "queue_cause_summary"),
                size_class="all", cause="capacity")  # fmt: skip
    assert (mine["decisions"], mine["waits"], mine["wait_s"], mine["stretches"]) == (
        2, 2, 10800.0, 2,
    )  # fmt: skip
    assert mine["out_of_order_pct"] == pytest.approx(50.0)  # j3
    theirs = q.summary(con, Filters(cluster="c", user="u2", start=DAY2.start, end=DAY2.end),
                       "queue_cause_summary")  # fmt: skip
    assert _row(theirs, size_class="all", cause="fragmentation")["decisions"] == 2  # j2, j4
    nobody = Filters(cluster="c", start=date(2026, 10, 5), end=date(2026, 10, 6))
    assert q.summary(con, nobody, "queue_cause_summary").is_empty()
    # a user's name is a value, never SQL (the sidebar's text field)
    nasty = Filters(cluster="c", user="u1' or '1'='1")
    assert q.summary(con, nasty, "queue_cause_summary").is_empty()


def test_table_7_of_a_period_and_its_attempts(con: duckdb.DuckDBPyConnection) -> None:
    """Day 10-02 keeps the attempts of j2 (GPU OOM) and j3 (time limit), not j1's of 10-01,
    though j1's job ran into 10-02: the drill-down lists the same attempts."""
    day = q.summary(con, DAY2, "failure_reasons")
    oom = _row(day, reason="GPU OOM")
    assert (oom["trials"], oom["jobs"], oom["users"], oom["rtf_p50_s"]) == (1, 1, 1, 1200.0)
    assert (oom["trials_2_4gpu"], oom["gpu_h"]) == (1, pytest.approx(4800 / 3600))
    assert oom["rtf_pct"] == pytest.approx(100 * 1200 / 4200)
    every = _row(day, reason="all")
    assert (every["trials"], every["jobs"], every["users"]) == (2, 2, 2)
    whole = _row(q.summary(con, Filters(cluster="c"), "failure_reasons"), reason="GPU OOM")
    assert (whole["trials"], whole["jobs"], whole["rtf_p50_s"]) == (2, 2, 900.0)
    mine = q.summary(con, Filters(cluster="c", user="u1"), "failure_reasons")
    assert _row(mine, reason="all")["trials"] == 2 and _row(mine, reason="GPU OOM")["jobs"] == 1
    attempts = q.failure_attempts(con, DAY2, None)
    assert sorted(attempts["job_id"]) == ["j2", "j3"]
    assert q.failure_attempts(con, DAY2, "GPU OOM")["job_id"].to_list() == ["j2"]
    assert sorted(q.failure_attempts(con, Filters(cluster="c"), None)["job_id"]) == [
        "j1", "j2", "j3",
    ]  # fmt: skip


def test_the_period_equals_report_since(con: duckdb.DuckDBPyConnection, data_dir: Path) -> None:
    """A period from 10-02 past the last event is `gpuwaste report --since 2026-10-02`: the same
    rows, figure for figure; from 10-01, every event: the stored table."""
    settings = Settings(data_dir=data_dir)
    for start, name in ((2, "queue_cause_summary"), (2, "failure_reasons"),
                        (1, "queue_cause_summary"), (1, "failure_reasons")):  # fmt: skip
        f = Filters(cluster="c", start=date(2026, 10, start), end=date(2026, 10, 9))
        shown = q.summary(con, f, name)
        since = report(settings, name, cluster="c", vc=ALL_VCS, model=ALL_MODELS,
                       since=f.period_start)  # fmt: skip
        assert shown.height == since.height > 0
        assert shown.sort(shown.columns).equals(since.select(shown.columns).sort(shown.columns))
    stored = q.summary(con, Filters(cluster="c"), "failure_reasons")
    assert not stored.equals(q.summary(con, DAY2, "failure_reasons"))
