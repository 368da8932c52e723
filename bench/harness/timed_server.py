"""`gpuwaste.dashboard.server` with its work written down, for bench/dashboard.py: one line of
JSON per page run, per query run (a miss of the dashboard's cache: the query's own time) and for
the start-up warm-up (`data.warm`), each with its wall seconds and its thread's CPU seconds.

    python bench/harness/timed_server.py LOG run app.py --server.port P ... (the server's args)
"""

from __future__ import annotations

import functools
import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuwaste.process import configure_process


def _timed(log: Path, kind: str, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    lock = threading.Lock()

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            line = {
                "kind": kind,
                "name": name,
                "thread": threading.current_thread().name,
                "start": t0,
                "wall_s": time.perf_counter() - t0,
                "thread_cpu_s": time.thread_time() - c0,
            }
            with lock, log.open("a") as out:
                out.write(json.dumps(line) + "\n")

    return run


def install(log: Path) -> None:
    """Wrap the queries `data.fetch` runs, `data.warm` and Streamlit's page run."""
    from streamlit.navigation.page import StreamlitPage

    from gpuwaste.dashboard import data

    for module in data.QUERY_MODULES.values():
        for name, fn in list(vars(module).items()):
            mine = getattr(fn, "__module__", None) == module.__name__
            if callable(fn) and mine and not isinstance(fn, type):
                setattr(module, name, _timed(log, "query", name, fn))
    data.warm = _timed(log, "warm", "warm", data.warm)  # type: ignore[method-assign]
    page_run = StreamlitPage.run

    def run(self: Any) -> None:
        _timed(log, "page", self.title, functools.partial(page_run, self))()

    StreamlitPage.run = run  # type: ignore[method-assign]


def main() -> int:
    configure_process()  # before anything imports polars, as the server does
    install(Path(sys.argv[1]))
    from gpuwaste.dashboard import server

    return server.main(sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
