"""One read-only query under a memory and a time bound: `gpuwaste sql` and the dashboard's SQL page.

DuckDB's `memory_limit` covers its buffer manager only: an aggregate such as `string_agg` stops
with DuckDB's Out of Memory error, but strings built by a scalar function (`repeat`) and the
result handed to Python are outside it and grow past it (measured: docs/reliability.md, the SQL
memory bomb). So a bounded query has three bounds:

1. DuckDB's own `memory_limit`, a share of the bound (readonly.limit_memory), which stops
   aggregates, joins and sorts with DuckDB's message, and its spill folder's size;
2. the process's data segment (RLIMIT_DATA: the heap and every private mapping, where each
   allocation lands) is bounded to its size before the query plus the bound while the query runs
   and its result is fetched; an allocation past it fails inside DuckDB as its Out of Memory
   error, and the process lives on;
3. the query runs in a worker thread while the calling thread waits at most its time, and on
   timeout or Ctrl-C interrupts it (DuckDB stops between chunks of rows).

The dashboard is one process for every session, whose memory a bound on the process would take
from the pages: its SQL page runs each query in a child process (`run_in_child`, this module as
`python -m`) under the same memory bound, killed when it outlives its time.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import duckdb
import polars as pl

from gpuwaste.errors import GpuwasteError
from gpuwaste.warehouse.reading import read_query
from gpuwaste.warehouse.readonly import check_read_only, read_only_connection

MIB = 2**20
# How long an interrupted query may take to stop (DuckDB checks between chunks of rows) before
# the caller is answered anyway.
STOP_WAIT_S = 10.0
# The child's exit statuses other than 0 (a frame on stdout) and 1 (DuckDB's or the refusal's
# message on stderr).
CHILD_OUT_OF_MEMORY = 3


@dataclass(frozen=True)
class Bounds:
    """A query's bounds, and where the operator raises each (named in the sentence)."""

    memory_mib: int
    timeout_s: float | None  # None: no time bound
    memory_key: str = "[sql] memory_mib in gpuwaste.toml"
    time_key: str = "[sql] timeout_s in gpuwaste.toml"

    def memory_sentence(self) -> str:
        return (
            f"the query needed more than {self.memory_mib:,} MiB of memory and was stopped; "
            f"raise {self.memory_key} to allow more."
        )

    def time_sentence(self) -> str:
        return (
            f"the query ran longer than {self.timeout_s:g} s and was stopped; "
            f"raise {self.time_key} to allow more."
        )


class BoundExceeded(GpuwasteError):
    """A query outgrew its memory or its time; the message names the bound and how to raise it."""


def is_out_of_memory(exc: BaseException) -> bool:
    """DuckDB's Out of Memory error (its buffer manager's limit, or an allocation the process's
    bound refused), or Python's and Arrow's (pyarrow's ArrowMemoryError is a MemoryError)."""
    return isinstance(exc, duckdb.OutOfMemoryException | MemoryError)


def _vm_data_bytes() -> int | None:
    """The process's data segment now (VmData), or None where /proc does not say (not Linux)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmData:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


# The bound is the process's: queries that overlap in one process share the first one's, and
# the last to end puts the previous bound back (else one could restore another's).
_bound_lock = threading.Lock()
_bound_users = 0
_bound_saved: tuple[int, int] | None = None


@contextmanager
def data_segment_bound(memory_mib: int) -> Iterator[None]:
    """Bound the process's data segment to its present size plus `memory_mib` (never above a
    bound already set); the previous bound is back on exit."""
    import resource  # POSIX only; the module is imported on every platform

    global _bound_users, _bound_saved
    with _bound_lock:
        now = _vm_data_bytes()
        if _bound_users == 0 and now is not None:
            soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
            limit = now + memory_mib * MIB
            for given in (soft, hard):
                if given != resource.RLIM_INFINITY:
                    limit = min(limit, given)
            _bound_saved = (soft, hard)
            resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
        _bound_users += 1
    try:
        yield
    finally:
        with _bound_lock:
            _bound_users -= 1
            if _bound_users == 0 and _bound_saved is not None:
                resource.setrlimit(resource.RLIMIT_DATA, _bound_saved)
                _bound_saved = None


T = TypeVar("T")


def waited(con: duckdb.DuckDBPyConnection, work: Callable[[], T], bounds: Bounds) -> T:
    """Run `work` (a read on `con`) in a worker thread under the memory bound; interrupt it when
    it outlives `bounds.timeout_s` (BoundExceeded) or on Ctrl-C (KeyboardInterrupt, re-raised
    once the query stopped)."""
    box: dict[str, object] = {}
    done = threading.Event()

    def target() -> None:
        try:
            box["value"] = work()
        except BaseException as exc:  # handed to the waiting thread, raised there
            box["error"] = exc
        finally:
            done.set()

    worker = threading.Thread(target=target, name="gpuwaste-bounded-query", daemon=True)
    with data_segment_bound(bounds.memory_mib):
        worker.start()
        try:
            finished = done.wait(bounds.timeout_s)
        except KeyboardInterrupt:
            con.interrupt()
            done.wait(STOP_WAIT_S)
            raise
        if not finished:
            con.interrupt()
            done.wait(STOP_WAIT_S)
            raise BoundExceeded(bounds.time_sentence())
    error = box.get("error")
    if isinstance(error, BaseException):
        if is_out_of_memory(error):
            raise BoundExceeded(bounds.memory_sentence()) from None
        raise error
    return box["value"]  # type: ignore[return-value]


def query_frame(
    data_dir: Path, sql: str, bounds: Bounds, max_rows: int | None = None
) -> pl.DataFrame | None:
    """Check and run one read-only query under `bounds`; its frame (at most `max_rows` + 1 rows
    when given, so that the caller can tell it was cut), or None for a statement without rows.
    BoundExceeded when a bound was hit; DuckDB's own error surfaces as duckdb.Error."""
    check_read_only(sql)
    con = read_only_connection(data_dir, memory_mib=bounds.memory_mib)
    limit = None if max_rows is None else max_rows + 1
    try:
        # read_query reads again a file replaced by a concurrent ingest
        return waited(con, lambda: read_query(con, sql, limit=limit), bounds)
    finally:
        con.close()


def run_in_child(data_dir: Path, sql: str, bounds: Bounds, max_rows: int) -> pl.DataFrame | None:
    """`query_frame` in a child process (this module), killed at `bounds.timeout_s`: the calling
    process never holds more than the frame. BoundExceeded, QueryRefused, or duckdb.Error with
    the child's message."""
    check_read_only(sql)  # refused at once, without starting a process
    command = [sys.executable, "-m", __name__, str(Path(data_dir)), str(bounds.memory_mib),
               str(max_rows)]  # fmt: skip
    try:
        done = subprocess.run(
            command, input=sql.encode(), capture_output=True, timeout=bounds.timeout_s,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
    except subprocess.TimeoutExpired:  # run() has killed the child
        raise BoundExceeded(bounds.time_sentence()) from None
    # a child killed by a signal was an allocator's abort past the bound, or the kernel's
    # out-of-memory killer
    if done.returncode == CHILD_OUT_OF_MEMORY or done.returncode < 0:
        raise BoundExceeded(bounds.memory_sentence())
    message = done.stderr.decode(errors="replace").strip()
    if done.returncode != 0:
        raise duckdb.Error(message or f"the query's process ended with status {done.returncode}.")
    return pl.read_ipc_stream(done.stdout) if done.stdout else None


def child_main(argv: Sequence[str]) -> int:
    """`python -m gpuwaste.warehouse.bounded DATA_DIR MEMORY_MIB MAX_ROWS` with the query on
    stdin: the frame as an Arrow IPC stream on stdout, or a message on stderr."""
    data_dir, memory_mib, max_rows = Path(argv[0]), int(argv[1]), int(argv[2])
    sql = sys.stdin.read()
    try:
        frame = query_frame(data_dir, sql, Bounds(memory_mib, None), max_rows)
    except BoundExceeded:
        return CHILD_OUT_OF_MEMORY
    except (GpuwasteError, duckdb.Error) as exc:
        print(str(exc).strip(), file=sys.stderr)
        return 1
    if frame is not None:
        frame.write_ipc_stream(sys.stdout.buffer)
    return 0


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
