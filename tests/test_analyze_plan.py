"""The plan of an analyze run, made in DuckDB (gpuwaste/analyses/plan.py): which jobs an
incremental run recomputes and which it removes, hand-computed; a batch's spec reads only its
own jobs from the plan file; the recorded fingerprints leave out failed jobs and a damaged
record means a full run, not a failure."""

from __future__ import annotations

from dataclasses import replace
from datetime import date
from pathlib import Path

import duckdb
import polars as pl
import pytest

from gpuwaste.analyses import state
from gpuwaste.analyses.batch import BatchPlan, BatchSpec
from gpuwaste.analyses.plan import TOUCHED_FILE, Since, write_batches, write_dirty
from gpuwaste.analyses.run import analyze
from gpuwaste.config import Settings, Thresholds
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
    template = BatchSpec("c", 0, (), Thresholds().model_dump_json(), "2026-04-01T00:00:00+00:00")
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
