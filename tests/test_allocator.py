"""The allocator setting `gpuwaste/__init__.py` gives polars' jemalloc (bench/RESULTS.md, "The
allocator"): in effect in polars when it is imported after gpuwaste, and never in place of an
operator's own `_RJEM_MALLOC_CONF`."""

from __future__ import annotations

import os
import subprocess

import gpuwaste
from tests.support.interpreter import run_fresh

# jemalloc prints its options at exit with stats_print, on stderr.
_PRINT_OPTIONS = """
import os
import gpuwaste
os.environ["_RJEM_MALLOC_CONF"] += ",stats_print:true"
import polars
polars.DataFrame({"a": range(1000)}).sum()
"""


def _run(code: str, conf: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "_RJEM_MALLOC_CONF"}
    if conf is not None:
        env["_RJEM_MALLOC_CONF"] = conf
    return run_fresh(code, env)


def _option(stderr: str, name: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip().startswith(name + ":")]
    assert lines, f"jemalloc printed no {name}: {stderr[:500]}"
    return lines[0].split()[1]


def test_importing_gpuwaste_does_not_import_polars_first() -> None:
    done = _run("import sys, gpuwaste; print('polars' in sys.modules)", None)
    assert done.stdout.strip() == "False"


def test_polars_allocator_keeps_freed_pages_five_seconds() -> None:
    stderr = _run(_PRINT_OPTIONS, None).stderr
    assert _option(stderr, "opt.dirty_decay_ms") == "5000"
    assert _option(stderr, "opt.muzzy_decay_ms") == "5000"
    assert _option(stderr, "opt.background_thread") == "true"
    assert gpuwaste.ALLOCATOR_CONF.startswith("background_thread:true")


def test_an_operators_own_setting_wins() -> None:
    stderr = _run(_PRINT_OPTIONS, "dirty_decay_ms:100").stderr
    assert _option(stderr, "opt.dirty_decay_ms") == "100"
    assert _option(stderr, "opt.muzzy_decay_ms") != "5000"
