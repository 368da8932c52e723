"""The per-job pass's step runner (`steps.run_steps`): a step's inputs are its function's
parameters; a pure step runs on a thread beside the steps after it, two pure steps run at once,
its output reaches the SQL steps that read it, and its failure fails the pass with nothing left
on the connection."""

from __future__ import annotations

import threading
from collections.abc import Callable

import duckdb
import polars as pl
import pytest

from gpuwaste.analyses import steps as steps_module
from gpuwaste.analyses.per_job import BATCH_STEPS, GPU_PARTS, GPU_STEPS, RESULT_OF
from gpuwaste.analyses.registry import PER_JOB_TABLES
from gpuwaste.analyses.steps import Relations, Step, run_steps
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

    def numbers(base: pl.DataFrame) -> pl.DataFrame:
        threads["pure"] = threading.current_thread().name
        assert started.wait(10), "the next step did not start while the pure step ran"
        return base.with_columns(doubled=pl.col("x") * 2)

    def marker() -> pl.DataFrame:
        threads["next"] = threading.current_thread().name
        started.set()
        return pl.DataFrame({"y": [1]})

    steps = (
        Step("base", lambda: pl.DataFrame({"x": [1, 2, 3]})),
        Step("doubled", numbers, pure=True),
        Step("marker", marker),
        Step("total", sql="__test__", inputs=("doubled", "marker")),
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

    def meeting(name: str) -> Callable[[pl.DataFrame], pl.DataFrame]:
        def step(base: pl.DataFrame) -> pl.DataFrame:
            both.wait()
            return base.select(pl.col("x").alias(name))

        return step

    steps = (
        Step("base", lambda: pl.DataFrame({"x": [1, 2, 3]})),
        Step("left", meeting("left"), pure=True),
        Step("right", meeting("right"), pure=True),
        Step("doubled", lambda left: left.select(doubled=pl.col("left") * 2), pure=True),
        Step("total", sql="__test__", inputs=("doubled", "right")),
    )
    with duckdb.connect() as con, Relations(con) as rel:
        out = _run(rel, steps, ("total", "right"), [])
        assert out["total"].to_dicts() == [{"n": 12}]
        assert out["right"]["right"].to_list() == [1, 2, 3]


def _broken(base: pl.DataFrame, t: Thresholds) -> pl.DataFrame:
    raise ValueError("no such column: mem")


BASE = Step("base", lambda: pl.DataFrame({"x": [1]}))


def test_a_failing_pure_step_fails_the_pass_and_leaves_nothing_on_the_connection() -> None:
    steps = (
        BASE,
        Step("doubled", _broken, pure=True),
        Step("total", sql="__test__", inputs=("doubled",)),
    )
    with duckdb.connect() as con:
        with pytest.raises(ValueError, match="no such column: mem"), Relations(con) as rel:
            _run(rel, steps, ("total",), [])
        assert not _names(con) & {"base", "doubled", "total"}


def test_a_pure_step_read_by_none_still_reports_its_failure() -> None:
    steps = (BASE, Step("unread", _broken, pure=True))
    with duckdb.connect() as con, Relations(con) as rel, pytest.raises(ValueError, match="mem"):
        _run(rel, steps, (), [])


def test_frames_reach_the_connection_only_when_sql_runs() -> None:
    """A pass of polars steps (a host range's) registers nothing on DuckDB; a query sees every
    frame, and the `with` block's end takes them off again."""
    doubled = Step("doubled", lambda base: base.select(doubled=pl.col("x") * 2))
    with duckdb.connect() as con:
        with Relations(con) as rel:
            out = _run(rel, (BASE, doubled), ("doubled",), [])
            assert out["doubled"]["doubled"].to_list() == [2]
            assert not _names(con) & {"base", "doubled"}
            assert rel.query("select sum(doubled)::int as n from doubled")["n"].to_list() == [2]
            assert "doubled" in _names(con)
        assert not _names(con) & {"base", "doubled"}


def test_a_steps_inputs_are_its_functions_parameters() -> None:
    """A function's parameters name the relations it reads, and `t` takes the thresholds: the
    thresholds reach the function, and the relations it does not name do not."""
    seen: dict[str, object] = {}

    def scaled(base: pl.DataFrame, t: Thresholds) -> pl.DataFrame:
        seen["t"] = t
        return base.select(pl.col("x") * t.idle_slot_min_s)

    step = Step("scaled", scaled)
    assert step.inputs == ("base",) and step.takes_thresholds
    frames = {"base": pl.DataFrame({"x": [2.0]}), "other": pl.DataFrame()}
    assert step.call(frames, T)["x"].to_list() == [2.0 * T.idle_slot_min_s]
    assert seen["t"] is T
    with pytest.raises(ValueError, match="parameters are its inputs"):
        Step("scaled", scaled, inputs=("base",))
    with pytest.raises(ValueError, match="either fn or sql"):
        Step("nothing")


def test_the_pass_reads_only_relations_made_before_or_given() -> None:
    """Each step of the per-job pass reads relations an earlier step made, the host range's
    (`range_alloc`, `range_samples`), or the batch's (views and temp tables): a renamed
    parameter of a step's function is caught here, not in a batch."""
    given = {"range_alloc", "range_samples"}
    made: set[str] = set()
    for step in GPU_STEPS:
        assert set(step.inputs) <= made | given, step.output
        made.add(step.output)
    assert all((s.fn is None) != (s.sql == "") for s in BATCH_STEPS)


def test_every_per_job_table_is_made_by_one_step_and_handed_on_by_each_range() -> None:
    """The lists of the pass are derived from its steps: each per-job table of the registry is
    the result of exactly one step, and a host range hands on every result it makes."""
    results = [s.result for s in BATCH_STEPS if s.result]
    assert sorted(results) == sorted(PER_JOB_TABLES)
    assert set(RESULT_OF.values()) == set(PER_JOB_TABLES)
    made_in_ranges = {s.output for s in GPU_STEPS}
    assert {r for r in RESULT_OF if r in made_in_ranges} <= set(GPU_PARTS)


@pytest.fixture(autouse=True)
def _test_sql(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SQL step `sql="__test__"` of these tests: the sum of frame `doubled`."""
    original = steps_module.load_sql

    def load(name: str) -> str:
        return (
            "select sum(doubled)::bigint as n from doubled"
            if name == "__test__"
            else original(name)
        )

    monkeypatch.setattr(steps_module, "load_sql", load)


def _run(
    rel: Relations, steps: tuple[Step, ...], keep: tuple[str, ...], laps: list[str]
) -> dict[str, pl.DataFrame]:
    return run_steps(rel, steps, keep, T, laps.append)
