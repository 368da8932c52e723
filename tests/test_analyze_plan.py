"""The plan of an analyze run, made in DuckDB (gpuwaste/analyses/plan.py): which jobs an
incremental run recomputes and which it removes, hand-computed; a batch's spec reads only its
own jobs from the plan file; the recorded fingerprints leave out failed jobs and a damaged
record means a full run, not a failure; the allocations that may share a device are listed
once per run (hand-computed, and against the pairwise definition)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import duckdb
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuwaste.analyses import state
from gpuwaste.analyses.batch import BatchPlan, BatchSpec
from gpuwaste.analyses.plan import TOUCHED_FILE, Since, write_batches, write_dirty
from gpuwaste.analyses.run import analyze
from gpuwaste.analyses.sqlfiles import load_sql, set_variables
from gpuwaste.config import Settings, Thresholds
from gpuwaste.warehouse.schema import JOB_GPUS
from tests.support.two_jobs import write_two_jobs

D = date(2026, 3, 1)


def fingerprints(rows: list[tuple[str, str, int, int, bool]]) -> pl.DataFrame:
    """(job_id, fingerprint, first day, last day (days after D), running) rows."""
    return pl.DataFrame(
        {
            "job_id": [r[0] for r in rows],
            "fingerprint": [r[1] for r in rows],
            "first_day": [D.replace(day=1 + r[2]) for r in rows],
            "last_day": [D.replace(day=1 + r[3]) for r in rows],
            "running": [r[4] for r in rows],
            "first_host": ["h1"] * len(rows),
        }
    )


KEPT = [
    ("same", "x", 0, 1, False),
    ("on_day_3", "x", 3, 3, False),
    ("running", "x", 0, 2, True),
    ("ends_day_5", "x", 4, 5, False),
]
BEFORE = fingerprints([*KEPT, ("changed", "x", 0, 1, False), ("gone", "x", 0, 0, False)])
NOW = fingerprints([*KEPT, ("changed", "y", 0, 1, False), ("new", "z", 1, 1, False)])


@pytest.mark.parametrize(
    ("changed_days", "as_of_moved", "since", "expected"),
    [
        ([], False, None, {"changed", "new"}),
        ([D.replace(day=4)], False, None, {"changed", "new", "on_day_3"}),
        ([D.replace(day=2)], False, None, {"changed", "new", "same", "running"}),
        ([], True, None, {"changed", "new", "running"}),
        ([], False, D.replace(day=6), {"changed", "new", "ends_day_5"}),
        ([D.replace(day=9)], False, D.replace(day=7), {"changed", "new"}),
    ],
)
def test_an_incremental_run_recomputes_what_changed_and_removes_what_went(
    tmp_path: Path,
    changed_days: list[date],
    as_of_moved: bool,
    since: date | None,
    expected: set[str],
) -> None:
    before, now = tmp_path / "before.parquet", tmp_path / "now.parquet"
    BEFORE.write_parquet(before)
    NOW.write_parquet(now)
    with duckdb.connect() as con:
        dirty, recomputed, removed = write_dirty(
            con, now, Since(before, changed_days, as_of_moved), since, tmp_path
        )
    assert set(pl.read_parquet(dirty)["job_id"]) == expected
    assert recomputed == len(expected)
    assert removed == 1
    assert set(pl.read_parquet(tmp_path / TOUCHED_FILE)["job_id"]) == expected | {"gone"}


def test_a_batch_spec_holds_only_its_own_jobs(tmp_path: Path) -> None:
    jobs = pl.DataFrame(
        {
            "job_id": [f"j{i}" for i in range(300)],
            "first_day": [D.replace(day=1 + i % 28) for i in range(300)],
            "first_host": [f"h{i % 7}" for i in range(300)],
        }
    )
    jobs.write_parquet(tmp_path / "dirty.parquet")
    plan_file = tmp_path / "plan.parquet"
    with duckdb.connect() as con:
        count = write_batches(con, tmp_path / "dirty.parquet", plan_file, 7, 3)
    template = BatchSpec(
        cluster="c", thresholds=Thresholds(), as_of=datetime(2026, 4, 1, tzinfo=UTC)
    )
    plan = BatchPlan(plan_file, count, template)
    specs = [plan.spec(i) for i in range(count)]
    assert sorted(j for s in specs for j in s.job_ids) == sorted(jobs["job_id"])
    assert [s.index for s in specs] == list(range(count))
    for s in specs:
        assert replace(s, index=0, job_ids=()) == template
        mine = jobs.filter(pl.col("job_id").is_in(list(s.job_ids)))
        assert mine["first_host"].n_unique() <= 3


def test_failed_jobs_are_not_recorded_and_a_damaged_record_means_a_full_run(
    tmp_path: Path,
) -> None:
    source = tmp_path / "fps.parquet"
    NOW.write_parquet(source)
    state.save(tmp_path, "c", state.AnalyzeState(), source, ["changed", "new"])
    recorded = state.fingerprints_file(tmp_path, "c")
    assert recorded is not None
    assert set(pl.read_parquet(recorded)["job_id"]) == set(NOW["job_id"]) - {"changed", "new"}
    recorded.write_bytes(b"not parquet")
    assert state.fingerprints_file(tmp_path, "c") is None

    data = tmp_path / "data"
    write_two_jobs(data)
    settings = Settings(data_dir=data)
    assert analyze(settings, quiet=True)[0].jobs_recomputed == 2
    assert analyze(settings, quiet=True)[0].jobs_recomputed == 0
    (data / "analyze_state" / "c.jobs.parquet").write_bytes(b"PAR1 damaged")
    again = analyze(settings, quiet=True)[0]
    assert again.rebuilt and again.jobs_recomputed == 2
    assert analyze(settings, quiet=True)[0].jobs_recomputed == 0


# --- the allocations that may share a device (plan/shared_spans.sql) -----------------------

T = datetime(2026, 3, 1, tzinfo=UTC)
SPAN_SCHEMA = {
    k: v for k, v in JOB_GPUS.columns.items() if k not in ("mig_profile", "gpu_model", "gpu_from")
}


def _shared_spans(rows: list[tuple[str, int, int | None, int | None, int | None]]) -> set[str]:
    """The job ids plan/shared_spans.sql lists for allocations (host, gpu, gpu_instance, start
    minute, end minute); job j<k> is row k. A null end is the job's, here none: as_of."""
    job_gpus = pl.DataFrame(
        {
            "cluster": ["c"] * len(rows),
            "job_id": [f"j{k}" for k in range(len(rows))],
            "attempt": [0] * len(rows),
            "host": [r[0] for r in rows],
            "gpu": [r[1] for r in rows],
            "gpu_instance": [r[2] for r in rows],
            "start_ts": [None if r[3] is None else T + timedelta(minutes=r[3]) for r in rows],
            "end_ts": [None if r[4] is None else T + timedelta(minutes=r[4]) for r in rows],
        },
        schema=SPAN_SCHEMA,
    )
    jobs = job_gpus.select("cluster", "job_id").with_columns(
        start_ts=pl.lit(None, pl.Datetime("us", "UTC")),
        end_ts=pl.lit(None, pl.Datetime("us", "UTC")),
    )
    with duckdb.connect() as con:
        con.execute("set TimeZone = 'UTC'")
        con.register("job_gpus", job_gpus)
        con.register("jobs", jobs)
        set_variables(con, {"cluster": "c", "as_of": T + timedelta(days=1)})
        return {
            r[0]
            for r in con.sql(f"select job_id from ({load_sql('plan/shared_spans')})").fetchall()
        }


def test_shared_spans_lists_the_allocations_that_overlap_on_a_device() -> None:
    """Hand-computed: on h/0, j0 [0, 60) and j1 [30, 90) overlap, j2 [90, 120) touches j1 only
    at its end (not an overlap); j3 [0, 60) is on another GPU, j4 [0, 60) on a MIG instance of
    h/0, j5 on another host; j6 has an unknown GPU (-1) and j7 no start; j8 [200, 300) on h/0
    holds j9 [250, 250), an empty interval inside it (listed, as every empty one)."""
    rows: list[tuple[str, int, int | None, int | None, int | None]] = [
        ("h", 0, None, 0, 60),
        ("h", 0, None, 30, 90),
        ("h", 0, None, 90, 120),
        ("h", 1, None, 0, 60),
        ("h", 0, 3, 0, 60),
        ("g", 0, None, 0, 60),
        ("h", -1, None, 0, 60),
        ("h", 0, None, None, 60),
        ("h", 0, None, 200, 300),
        ("h", 0, None, 250, 250),
    ]
    assert _shared_spans(rows) == {"j0", "j1", "j8", "j9"}
    # a running allocation (no end) is held up to as_of: it overlaps what starts after it
    assert _shared_spans([("h", 0, None, 0, None), ("h", 0, None, 600, 700)]) == {"j0", "j1"}


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b"]),
            st.integers(0, 1),
            st.sampled_from([None, 0]),
            st.integers(0, 40),
            st.integers(0, 40),
        ),
        max_size=14,
    )
)
def test_shared_spans_holds_every_allocation_that_overlaps_another(
    rows: list[tuple[str, int, int | None, int, int]],
) -> None:
    """Against the pairwise definition staging/allocations.sql joins by (same device, each
    starts before the other ends): every overlapping allocation is listed (so a batch finds
    all its sharers), and when no interval is empty or reversed, nothing else is."""
    typed: list[tuple[str, int, int | None, int | None, int | None]] = list(rows)
    listed = _shared_spans(typed)
    overlapping = {
        f"j{i}"
        for i, a in enumerate(rows)
        for k, o in enumerate(rows)
        if i != k and a[:3] == o[:3] and o[3] < a[4] and o[4] > a[3]
    }
    assert overlapping <= listed
    if all(r[3] < r[4] for r in rows):
        assert listed == overlapping
