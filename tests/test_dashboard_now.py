"""The "Running now" page and its query (analyses.reads.idle_now) on a hand-built warehouse with a
planted answer: which running jobs are idle on every GPU up to the newest data, since when, on
how many GPUs. Rows are written through Warehouse.replace_file, as `gpuwaste analyze` does."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from streamlit.testing.v1 import AppTest

from gpuwaste.analyses import reads
from gpuwaste.config import DATA_DIR_ENV
from gpuwaste.dashboard.filters import Filters
from gpuwaste.warehouse.catalog import refresh_catalog
from gpuwaste.warehouse.readonly import read_only_connection
from gpuwaste.warehouse.store import Warehouse
from tests.test_dashboard_app import APP, TIMEOUT, _open

AS_OF = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)  # how far the data reached (allocation end)
H = timedelta(hours=1)
M = timedelta(minutes=1)

# job id -> (user, vc, running, GPUs as (host, gpu, never_used, [(slot start, slot end)]),
#            attempt, allocation start, allocation end)
Gpu = tuple[str, int, bool, list[tuple[datetime, datetime]]]
PLANT: dict[str, tuple[str, str, bool, list[Gpu], int, datetime, datetime]] = {
    # running, both GPUs idle to the end: all idle since the later start, 2 h
    "all-idle": ("alice", "nlp", True, [
        ("n1", 0, False, [(AS_OF - 3 * H, AS_OF)]),
        ("n1", 1, False, [(AS_OF - 5 * H, AS_OF - 4 * H), (AS_OF - 2 * H, AS_OF)]),
    ], 0, AS_OF - 6 * H, AS_OF),
    # running, one GPU idle to the end, the other busy: not listed
    "some-idle": ("bob", "nlp", True, [
        ("n2", 0, False, [(AS_OF - 3 * H, AS_OF)]),
        ("n2", 1, False, [(AS_OF - 3 * H, AS_OF - 2 * H)]),
    ], 0, AS_OF - 6 * H, AS_OF),
    # finished, idle on both GPUs to its end: not running, not listed
    "finished": ("alice", "vision", False, [
        ("n3", 0, False, [(AS_OF - 4 * H, AS_OF - H)]),
        ("n3", 1, True, []),
    ], 0, AS_OF - 5 * H, AS_OF - H),
    # running, one GPU never used, three in idle slots to the end: idle since 30 min
    "never-used": ("carol", "vision", True, [
        ("n4", 0, True, []),
        ("n4", 1, False, [(AS_OF - H, AS_OF)]),
        ("n4", 2, False, [(AS_OF - 30 * M, AS_OF)]),
        ("n4", 3, False, [(AS_OF - 45 * M, AS_OF)]),
    ], 0, AS_OF - 4 * H, AS_OF),
    # running, its GPU's last idle slot ends 20 min before the newest data (no data since): not
    # known to be idle now
    "stale": ("dave", "nlp", True, [("n5", 0, False, [(AS_OF - 2 * H, AS_OF - 20 * M)])],
              0, AS_OF - 3 * H, AS_OF),
}  # fmt: skip
# A restarted job: its first attempt was idle to that attempt's end; the running attempt is busy.
RESTARTED = "restarted"


def _write(data_dir: Path) -> None:
    jobs: list[dict[str, Any]] = []
    gpus: list[dict[str, Any]] = []
    slots: list[dict[str, Any]] = []

    def alloc(job: str, attempt: int, g: Gpu, start: datetime, end: datetime) -> None:
        host, gpu, never, spans = g
        gpus.append({"job_id": job, "attempt": attempt, "host": host, "gpu": gpu,
                     "start_ts": start, "end_ts": end, "never_used": never,
                     "alloc_s": (end - start).total_seconds()})  # fmt: skip
        for a, b in spans:
            slots.append({"job_id": job, "attempt": attempt, "host": host, "gpu": gpu,
                          "start_ts": a, "end_ts": b, "duration_s": (b - a).total_seconds()})  # fmt: skip

    for job, (user, vc, running, gs, attempt, start, end) in PLANT.items():
        jobs.append({"job_id": job, "user": user, "vc": vc, "name": f"{job} job", "gpus": len(gs),
                     "running": running, "state": "running" if running else "passed",
                     "size_class": "1" if len(gs) == 1 else "2-4", "start_ts": start,
                     "end_ts": None if running else end})  # fmt: skip
        for g in gs:
            alloc(job, attempt, g, start, end)
    jobs.append({"job_id": RESTARTED, "user": "erin", "vc": "nlp", "name": "r", "gpus": 1,
                 "running": True, "state": "running", "size_class": "1",
                 "start_ts": AS_OF - 5 * H, "end_ts": None})  # fmt: skip
    alloc(
        RESTARTED,
        0,
        ("n6", 0, False, [(AS_OF - 4 * H, AS_OF - 3 * H)]),
        AS_OF - 5 * H,
        AS_OF - 3 * H,
    )
    alloc(RESTARTED, 1, ("n6", 0, False, []), AS_OF - 2 * H, AS_OF)
    wh = Warehouse(data_dir)
    wh.replace_file("job_usage", "c1", "built", pl.DataFrame(jobs))
    wh.replace_file("job_gpu_usage", "c1", "built", pl.DataFrame(gpus))
    wh.replace_file("idle_slots", "c1", "built", pl.DataFrame(slots))
    refresh_catalog(data_dir, force=True)


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("now") / "data"
    _write(d)
    return d


def _idle_now(planted: Path, f: Filters) -> pl.DataFrame:
    con = read_only_connection(planted)
    try:
        return reads.idle_now(con, *f.running_now().jobs_where("u"))
    finally:
        con.close()


def test_idle_now_lists_the_running_jobs_idle_on_every_gpu(planted: Path) -> None:
    got = _idle_now(planted, Filters())
    # most idle GPU hours first: never-used (4 + 1 + 0.5 + 0.75 = 6.25) then all-idle (3 + 2)
    assert got["job_id"].to_list() == ["never-used", "all-idle"]
    rows = {r["job_id"]: r for r in got.iter_rows(named=True)}
    a = rows["all-idle"]
    assert (a["user"], a["vc"], a["gpus"]) == ("alice", "nlp", 2)
    assert a["idle_since"] == AS_OF - 2 * H and a["idle_h"] == 2.0 and a["idle_gpu_h"] == 5.0
    assert a["as_of"] == AS_OF
    n = rows["never-used"]
    assert n["gpus"] == 4 and n["idle_since"] == AS_OF - 30 * M
    assert n["idle_h"] == 0.5 and n["idle_gpu_h"] == 6.25


def test_idle_now_honors_cluster_vc_user_and_size_not_period_or_state(planted: Path) -> None:
    assert _idle_now(planted, Filters(user="alice"))["job_id"].to_list() == ["all-idle"]
    assert _idle_now(planted, Filters(vcs=("vision",)))["job_id"].to_list() == ["never-used"]
    assert _idle_now(planted, Filters(cluster="other")).height == 0
    assert _idle_now(planted, Filters(sizes=("1",))).height == 0
    old = Filters(start=date(2020, 1, 1), end=date(2020, 1, 2), states=("passed",))
    assert _idle_now(planted, old)["job_id"].to_list() == ["never-used", "all-idle"]


@pytest.fixture
def app(planted: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[AppTest]:
    monkeypatch.setenv(DATA_DIR_ENV, str(planted))
    yield AppTest.from_file(APP, default_timeout=TIMEOUT)


def test_running_now_page_lists_them_ready_to_act_on(app: AppTest) -> None:
    at = _open(app, "now")
    assert at.title[0].value == "Running now"
    (table,) = [d.value for d in at.dataframe]
    assert table["Job id"].to_list() == ["never-used", "all-idle"]
    assert table["User"].to_list() == ["carol", "alice"]
    assert table["GPUs"].to_list() == [4, 2]
    assert table["Idle for (hours)"].to_list() == [0.5, 2.0]
    assert table["All GPUs idle since (UTC)"].to_list() == ["2026-11-01 11:30", "2026-11-01 10:00"]
    assert table["Idle GPU hours"].to_list() == [pytest.approx(6.25, abs=0.05), 5.0]
    (button,) = at.get("download_button")
    assert button.proto.label == "Download CSV"
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Jobs idle on all GPUs"] == "2 jobs" and metrics["GPUs held idle"] == "6 GPUs"
    assert metrics["GPU hours idle so far"] == "11.2 GPU h"
    # the planted data end on 2026-11-01: late past 3 scheduled updates, said so with their age
    (late,) = [str(w.value) for w in at.warning if "newest data" in str(w.value)]
    assert "up to 2026-11-01 12:00 UTC" in late and "days old" in late
    assert "Select a row to open the job." in [str(c.value) for c in at.caption]


def test_running_now_page_with_none_idle(app: AppTest) -> None:
    at = _open(app, "now", user="bob")
    assert not at.dataframe
    assert "No running job is idle on all its GPUs" in str(at.info[0].value)


def test_lateness_warns_past_three_scheduled_updates() -> None:
    from gpuwaste.analyses.freshness import age_text, lateness, newest_data

    newest = datetime(2026, 11, 1, 11, 59, tzinfo=UTC)
    assert lateness(newest, newest + 15 * M, 300.0) is None  # 3 x 300 s: on time
    late = lateness(newest, newest + 16 * M, 300.0)
    assert late is not None and "16 min old" in late and "update_interval_s" in late
    month = lateness(newest, datetime(2026, 11, 29, 4, 30, tzinfo=UTC), 300.0)
    assert month is not None and "28 days old (up to 2026-11-01 11:59 UTC)" in month
    assert "No GPU sample" in str(lateness(None, newest, 300.0))
    assert [age_text(s) for s in (30, 5400, 3 * 86400)] == ["0 min", "1.5 h", "3 days"]
    fresh = pl.DataFrame(
        {"cluster": ["a", "a", "b"], "analyzed_up_to": [newest, newest - H, None],
         "samples_newest": [None, None, newest + H]}
    )  # fmt: skip
    assert newest_data(fresh, "a") == newest and newest_data(fresh, "b") == newest + H
    assert newest_data(fresh, "c") is None
