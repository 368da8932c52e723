"""The Streamlit server process that `gpuwaste dashboard` starts:

    python -m gpuwaste.dashboard.server run app.py --server.address ... (Streamlit's own options)

It imports what the app's pages run on (polars, DuckDB, the query and chart modules) before the
server listens, then hands over to Streamlit's command line. Without it the first visitor after a
start waits for those imports inside the first page run (the first visit's time with and without
them: bench/RESULTS.md, "Dashboard on 1 M jobs"). Once the server runs, a thread opens the
warehouse's connection and fills the caches every page's sidebar reads (`data.warm`), so that the
first visitor does not wait for them either.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import sys
import threading
import time

from gpuwaste.process import configure_process

WARM_THREAD = "gpuwaste-warm"  # the thread that runs `data.warm` once the server runs

# Imported on the first page run otherwise: pandas and pyarrow (Streamlit turns frames into Arrow
# through them) and Streamlit's own modules for tables and charts. Best effort: Streamlit's
# internal module names may change, and a missing one only costs the first visitor the wait.
LAZY_MODULES = (
    "pandas",
    "pyarrow",
    "pyarrow.ipc",
    "streamlit.dataframe_util",
    "streamlit.elements.arrow",
    "streamlit.elements.vega_charts",
)


def preload() -> None:
    """Import the modules every page's first run needs."""
    import duckdb  # noqa: F401
    import polars  # noqa: F401

    # Declaring a cached function before Streamlit's runtime exists logs "No runtime found" (its
    # check of the cache's parameters); the caches themselves are made later, in the runtime.
    import streamlit.runtime.caching.cache_data_api  # noqa: F401  (configures its logger)

    quiet = logging.getLogger("streamlit.runtime.caching.cache_data_api")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        import gpuwaste.dashboard.widgets  # noqa: F401  (and charts, data, queries with it)
    finally:
        quiet.setLevel(level)

    for name in LAZY_MODULES:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)


def warm_when_running(timeout_s: float = 60.0) -> None:
    """Once Streamlit's runtime runs (its caches exist), `data.warm`: best effort, a failure
    only leaves the work to the first visitor, whose page then says what is wrong."""
    from streamlit import runtime

    from gpuwaste.dashboard import data

    deadline = time.monotonic() + timeout_s
    while not runtime.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    if not runtime.exists():
        return
    # a cached function called outside a page logs "missing ScriptRunContext": expected here
    quiet = logging.getLogger("streamlit.runtime.scriptrunner_utils.script_run_context")
    quiet.setLevel(logging.ERROR)
    with contextlib.suppress(Exception):
        data.warm()


def main(argv: list[str]) -> int:
    configure_process()  # the dashboard's own process: before preload imports polars
    preload()
    threading.Thread(target=warm_when_running, name=WARM_THREAD, daemon=True).start()
    from streamlit.web import cli

    sys.argv = ["streamlit", *argv]
    return int(cli.main() or 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
