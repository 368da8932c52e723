"""The per-job pass's step runner (`per_job.run_steps`): a pure step runs on a thread beside the
steps after it, two pure steps run at once, its output reaches the SQL steps that read it, and its failure fails the pass
with nothing left on the connection."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

import duckdb
import polars as pl
import pytest

from gpuwaste.analyses import per_job
from gpuwaste.analyses.per_job import Relations, Step, run_steps
from gpuwaste.config import Thresholds

T = Thresholds()


def _names(con: duckdb.DuckDBPyConnection) -> set[str]:
    return {
        r[0] for r in con.sql("select view_name from duckdb_views() where not internal").fetchall()
    }


def test_a_pure_step_runs_beside_the_next_steps_and_reaches_the_sql_that_reads_it() -> None:
    """The pure step waits for the step after it to start: run in order on one thread, the pass
    would wait for 10 s and fail."""
    started = threading.Event()
    threads: dict[str, str] = {}

    def numbers(frames: Mapping[str, pl.DataFrame], t: Thresholds) -> pl.DataFrame:
        threads["pure"] = threading.current_thread().name
        assert started.wait(10), "the next step did not start while the pure step ran"
        return frames["base"].with_columns(doubled=pl.col("x") * 2)

    def marker(frames: Mapping[str, pl.DataFrame], t: Thresholds) -> pl.DataFrame:
        threads["next"] = threading.current_thread().name
        started.set()
        return pl.DataFrame({"y": [1]})

    steps = (
        Step("base", (), fn=lambda f, t: pl.DataFrame({"x": [1, 2, 3]})),
        Step("doubled", ("base",), pure=numbers),
        Step("marker", (), fn=marker),
        Step("total", ("doubled", "marker"), sql="__test__"),
    )
    laps: list[str] = []
    with duckdb.connect() as con, Relations(con) as rel:
        out = _run(rel, steps, ("total", "doubled"), laps)
        assert out["total"].to_dicts() == [{"n": 12}]
        assert out["doubled"]["doubled"].to_list() == [2, 4, 6]
    assert threads["pure"].startswith("gpuwaste-step")
    assert threads["next"] == threading.current_thread().name
    assert "pure steps (waited for)" in laps
    assert "doubled" not in laps  # its time is the wait, not a step of the main thread


def test_two_pure_steps_run_at_once_and_one_reads_another() -> None:
    """The first two pure steps each wait for the other to start (a barrier): on one thread the
    pass would fail after 10 s. The third reads the first's output, from the other thread."""
    both = threading.Barrier(2, timeout=10)

    def meeting(name: str) -> Callable[[Mapping[str, pl.DataFrame], Thresholds], pl.DataFrame]:
        def step(frames: Mapping[str, pl.DataFrame], t: Thresholds) -> pl.DataFrame:
            both.wait()
            return frames["base"].select(pl.col("x").alias(name))

        return step

    steps = (
        Step("base", (), fn=lambda f, t: pl.DataFrame({"x": [1, 2, 3]})),
        Step("left", ("base",), pure=meeting("left")),
        Step("right", ("base",), pure=meeting("right")),
        Step("doubled", ("left",), pure=lambda f, t: f["left"].select(doubled=pl.col("left") * 2)),
        Step("total", ("doubled", "right"), sql="__test__"),
    )
    with duckdb.connect() as con, Relations(con) as rel:
        out = _run(rel, steps, ("total", "right"), [])
        assert out["total"].to_dicts() == [{"n": 12}]
        assert out["right"]["right"].to_list() == [1, 2, 3]


def _broken(frames: Mapping[str, pl.DataFrame], t: Thresholds) -> pl.DataFrame:
    raise ValueError("no such column: mem")


BASE = Step("base", (), fn=lambda f, t: pl.DataFrame({"x": [1]}))


def test_a_failing_pure_step_fails_the_pass_and_leaves_nothing_on_the_connection() -> None:
    steps = (
        BASE,
        Step("doubled", ("base",), pure=_broken),
        Step("total", ("doubled",), sql="__test__"),
    )
    with duckdb.connect() as con:
        with pytest.raises(ValueError, match="no such column: mem"), Relations(con) as rel:
            _run(rel, steps, ("total",), [])
        assert not _names(con) & {"base", "doubled", "total"}


def test_a_pure_step_read_by_none_still_reports_its_failure() -> None:
    steps = (BASE, Step("unread", ("base",), pure=_broken))
    with duckdb.connect() as con, Relations(con) as rel, pytest.raises(ValueError, match="mem"):
        _run(rel, steps, (), [])


def test_frames_reach_the_connection_only_when_sql_runs() -> None:
    """A pass of polars steps (a host range's) registers nothing on DuckDB; a query sees every
    frame, and the `with` block's end takes them off again."""
    doubled = Step("doubled", ("base",), fn=lambda f, t: f["base"].select(doubled=pl.col("x") * 2))
    with duckdb.connect() as con:
        with Relations(con) as rel:
            out = _run(rel, (BASE, doubled), ("doubled",), [])
            assert out["doubled"]["doubled"].to_list() == [2]
            assert not _names(con) & {"base", "doubled"}
            assert rel.query("select sum(doubled)::int as n from doubled")["n"].to_list() == [2]
            assert "doubled" in _names(con)
        assert not _names(con) & {"base", "doubled"}


@pytest.fixture(autouse=True)
def _test_sql(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SQL step `sql="__test__"` of these tests: the sum of frame `doubled`."""
    original = per_job.load_sql

    def load(name: str) -> str:
        return (
            "select sum(doubled)::bigint as n from doubled"
            if name == "__test__"
            else original(name)
        )

    monkeypatch.setattr(per_job, "load_sql", load)


def _run(
    rel: Relations, steps: tuple[Step, ...], keep: tuple[str, ...], laps: list[str]
) -> dict[str, pl.DataFrame]:
    return run_steps(rel, steps, keep, T, laps.append)
