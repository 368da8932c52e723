"""The per-job pass's step runner: `Step`s run in order over `Relations` by `run_steps`.

A step makes one relation. A Python step's function takes the relations it reads by name: its
parameters are their names (and `t`, if it takes the thresholds), so a step's inputs are read
from its function and written once. A SQL step's file reads the relations by name, so each
output is put on the DuckDB connection under its name inside `Relations`, a context manager
that takes every name off again when the pass ends, on an error too; an output is released as
soon as the last step that reads it has run. A pure step (polars, numpy or compiled loops over
frames, no connection) runs on one of two threads beside the steps after it, and its output is
put on the connection when a SQL step reads it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from types import TracebackType

import duckdb
import polars as pl

from gpuwaste.analyses.sqlfiles import load_sql
from gpuwaste.config import Thresholds
from gpuwaste.warehouse.schema import conform, table

# The parameter by which a step's function takes the thresholds; every other parameter names a
# relation the step reads.
THRESHOLDS = "t"


def conform_result(df: pl.DataFrame, name: str) -> pl.DataFrame:
    """`df` with the stored columns and types of result table `name`."""
    t = table(name)
    if not df.columns:  # nothing computed (a batch without allocations): no rows, not a null row
        return pl.DataFrame(schema=t.stored_columns)
    return conform(df, t, stored=True)


class Relations:
    """Frames and temp tables put on a DuckDB connection by name for one pass; every name is
    taken off when the `with` block ends, whether it ends normally or by an error. A frame
    reaches the connection only when SQL runs (`query`, `table`, `expose`): registering one has
    a fixed cost (bench/RESULTS.md), and most steps of a host range are polars and numpy, which
    read the frames as they are."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con
        self.frames: dict[str, pl.DataFrame] = {}
        self._tables: list[str] = []
        self._exposed: set[str] = set()

    def frame(self, name: str, df: pl.DataFrame) -> pl.DataFrame:
        self.frames[name] = df
        self._exposed.discard(name)  # (again) before the next SQL
        return df

    def expose(self) -> None:
        """Every frame on the connection under its name (for SQL run on `con` directly)."""
        for name, df in self.frames.items():
            if name not in self._exposed:
                self.con.register(name, df)
                self._exposed.add(name)

    def query(self, sql: str) -> pl.DataFrame:
        """The rows of `sql` over the connection and the frames."""
        self.expose()
        return self.con.sql(sql).pl()

    def table(self, name: str, sql: str) -> None:
        self.expose()
        self.con.execute(f"create or replace temp table {name} as {sql}")
        if name not in self._tables:
            self._tables.append(name)

    def release(self, name: str) -> None:
        if self.frames.pop(name, None) is not None and name in self._exposed:
            self._exposed.discard(name)
            self.con.unregister(name)
        if name in self._tables:
            self._tables.remove(name)
            self.con.execute(f"drop table if exists {name}")

    def __enter__(self) -> Relations:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for name in [*self.frames, *self._tables]:
            try:
                self.release(name)
            except duckdb.Error:
                if exc is None:
                    raise  # a failure while cleaning up is reported only if nothing else was


@dataclass(frozen=True)
class Step:
    """One step of the pass: relation `output`, made by the function `fn` (polars, numpy or
    compiled loops over frames; its parameters name the relations it reads, and `t` takes the
    thresholds) or by the SQL file `sql` (under gpuwaste/sql/), which reads the relations
    `inputs` (its header's sources). `pure`: `fn` touches no connection, so `run_steps` runs it
    on a thread beside the next steps. `result`: the result table the output's rows belong to,
    conformed to its columns here unless `conform` is False (rows added up over the host ranges
    first). `temp_table`: a SQL step's output is a temp table (read by several SQL steps), else
    a frame. Inputs not made by an earlier step are the warehouse's views or the batch's
    relations."""

    output: str
    fn: Callable[..., pl.DataFrame] | None = None
    sql: str = ""
    inputs: tuple[str, ...] = ()
    result: str = ""
    conform: bool = True
    temp_table: bool = False
    pure: bool = False
    takes_thresholds: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        if (self.fn is None) == (not self.sql):
            raise ValueError(f"step {self.output}: give either fn or sql")
        if self.fn is not None:
            if self.inputs:
                raise ValueError(f"step {self.output}: a function's parameters are its inputs")
            names = tuple(inspect.signature(self.fn).parameters)
            object.__setattr__(self, "inputs", tuple(n for n in names if n != THRESHOLDS))
            object.__setattr__(self, "takes_thresholds", THRESHOLDS in names)
        elif self.pure:
            raise ValueError(f"step {self.output}: a SQL step reads the connection")

    def call(self, frames: Mapping[str, pl.DataFrame], thresholds: Thresholds) -> pl.DataFrame:
        """The output of a function step from `frames`, conformed to `result` if asked."""
        assert self.fn is not None
        args = {name: frames[name] for name in self.inputs}
        if self.takes_thresholds:
            args[THRESHOLDS] = thresholds  # type: ignore[assignment]
        return self._conformed(self.fn(**args))

    def compute(
        self, sources: Mapping[str, pl.DataFrame | Future[pl.DataFrame]], thresholds: Thresholds
    ) -> pl.DataFrame:
        """The output of a `pure` step from its inputs (a future: a pure step submitted before
        it, so already taken by a thread of the same pool and not waiting for this one)."""
        frames = {n: f.result() if isinstance(f, Future) else f for n, f in sources.items()}
        return self.call(frames, thresholds)

    def run(self, rel: Relations, thresholds: Thresholds) -> None:
        if self.sql and self.temp_table:
            rel.table(self.output, load_sql(self.sql))
            return
        if self.sql:
            df = self._conformed(rel.query(load_sql(self.sql)))
        else:
            df = self.call(rel.frames, thresholds)
        rel.frame(self.output, df)

    def _conformed(self, df: pl.DataFrame) -> pl.DataFrame:
        return conform_result(df, self.result) if self.result and self.conform else df


def run_steps(
    rel: Relations,
    steps: tuple[Step, ...],
    keep: tuple[str, ...],
    thresholds: Thresholds,
    record_time: Callable[[str], None],
    pure_threads: Executor | None = None,
) -> dict[str, pl.DataFrame]:
    """Run `steps` in order on `rel`; each output is released after the last step that reads it,
    except those in `keep`, whose frames are returned (`rel` takes their names off at its end).

    A `pure` step runs on a thread of `pure_threads` while the next steps run on the connection
    (the SQL steps leave part of the cores idle, a numpy step uses one): its output is put on the
    connection when a step that is not pure reads it, or at the end if kept. A step that waits
    for it counts the wait in `record_time` (which adds the seconds since its last call to a
    step's name) as "pure steps (waited for)". `pure_threads`: the threads pure steps run on
    (`pure_step_threads`; a batch keeps them for all its host ranges: memory a thread frees is
    reused by that thread, where new threads per range took more, bench/RESULTS.md); without
    it, threads of their own."""
    last_reader = {name: i for i, step in enumerate(steps) for name in step.inputs}
    made: set[str] = set()
    with ExitStack() as stack:
        if pure_threads is None:
            pure_threads = stack.enter_context(pure_step_threads())
        pending: dict[str, Future[pl.DataFrame]] = {}

        def await_outputs(names: Iterable[str]) -> None:
            """Wait for the pure steps that make `names` and put their outputs on `rel`."""
            waiting = [n for n in names if n in pending]
            for name in waiting:
                rel.frame(name, pending.pop(name).result())
            if waiting:
                record_time("pure steps (waited for)")

        for i, step in enumerate(steps):
            if step.pure:
                sources = {n: pending.get(n) or rel.frames[n] for n in step.inputs}
                pending[step.output] = pure_threads.submit(step.compute, sources, thresholds)
            else:
                await_outputs(step.inputs)
                step.run(rel, thresholds)
                record_time(step.output)
            made.add(step.output)
            for name in [
                n for n in step.inputs if n in made and last_reader[n] == i and n not in keep
            ]:
                pending.pop(name, None)  # read by pure steps only: they hold it until done
                rel.release(name)
        await_outputs([name for name in keep if name in pending])
        for future in pending.values():
            future.result()  # a pure step that nothing reads: its error is not lost
    return {name: rel.frames[name] for name in keep if name in rel.frames}


def pure_step_threads() -> ThreadPoolExecutor:
    """The threads `run_steps` runs pure steps on: two, so that while the SQL steps wait for the
    pure ones (one numpy step uses one core) both cores work (bench/RESULTS.md)."""
    return ThreadPoolExecutor(2, thread_name_prefix="gpuwaste-step")


__all__ = ["THRESHOLDS", "Relations", "Step", "conform_result", "pure_step_threads", "run_steps"]
