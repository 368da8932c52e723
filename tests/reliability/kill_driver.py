"""Run the `gpuwaste` command line and SIGKILL it at an exact point, for the killed-ingest tests.

    python -m tests.reliability.kill_driver ingest prometheus --config ... --cluster c1

The ingest code has no test hook, so this driver adds one from outside: it wraps the three
things every durable write goes through and counts them, in order, as *events*:

- `write`: `store.write_parquet_file` of a temporary file. Killing here writes the file, cuts it
  to half its size (a parquet write torn mid-way), then dies;
- `rename` / `rename-watermark`: `os.replace` of a finished temporary file over the old one
  (`-watermark` when inside `set_watermark`, i.e. during the watermark update). Killing here dies
  just before the rename; `<n>+` dies just after it;
- `watermark`: entry to `set_watermark` (every window's data written, the watermark not yet).

`GPUWASTE_TEST_KILL_AT=<n>` or `<n>+` kills at event n (0-based) with SIGKILL: no cleanup,
no `finally`, no flush, as `kill -9` or the OOM killer would. `GPUWASTE_TEST_TRACE=<file>`
writes the list of events of an uninterrupted run as JSON.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import polars as pl

EVENTS: list[str] = []
_spec = os.environ.get("GPUWASTE_TEST_KILL_AT", "")
KILL_AT = int(_spec.rstrip("+")) if _spec else -1
AFTER = _spec.endswith("+")
_in_watermark = [False]


def _die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def _event(name: str) -> bool:
    """Record an event; True when this is the one to die at."""
    EVENTS.append(name)
    return len(EVENTS) - 1 == KILL_AT


def install() -> None:
    import gpuwaste.ingest.prometheus.source as ingest
    import gpuwaste.warehouse.store as store

    real_write = store.write_parquet_file
    real_replace = os.replace
    real_set_watermark = ingest.set_watermark

    def write_parquet_file(df: pl.DataFrame, path: Path, **kwargs: Any) -> None:
        kill = _event("write")
        real_write(df, path, **kwargs)
        if kill:
            with open(path, "rb+") as fh:
                fh.truncate(path.stat().st_size // 2)
            _die()

    def replace(src: Any, dst: Any, **kwargs: Any) -> None:
        kill = _event("rename-watermark" if _in_watermark[0] else "rename")
        if kill and not AFTER:
            _die()
        real_replace(src, dst, **kwargs)
        if kill and AFTER:
            _die()

    def set_watermark(*args: Any, **kwargs: Any) -> None:
        if _event("watermark"):
            _die()
        _in_watermark[0] = True
        try:
            real_set_watermark(*args, **kwargs)
        finally:
            _in_watermark[0] = False

    store.write_parquet_file = write_parquet_file
    os.replace = replace
    ingest.set_watermark = set_watermark


def main() -> None:
    install()
    from gpuwaste.cli import main as cli_main

    sys.argv = ["gpuwaste", *sys.argv[1:]]
    trace = os.environ.get("GPUWASTE_TEST_TRACE")
    try:
        cli_main()
    finally:
        if trace:
            Path(trace).write_text(json.dumps(EVENTS))


if __name__ == "__main__":
    main()
