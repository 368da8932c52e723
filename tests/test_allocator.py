"""The allocator settings of gpuwaste/process.py, made where a gpuwaste process starts and
nowhere else: the `gpuwaste` command (its console script, as pyproject.toml declares it) runs
with polars' jemalloc keeping freed pages 5 s, then giving them back (bench/RESULTS.md, "The
allocator"), and serving requests of 64 KiB and more from one arena ("One arena for large
blocks"), and with glibc mapping blocks of 1 MiB and more on their own ("The run's own steps
capped"); neither in place of an operator's own `_RJEM_MALLOC_CONF` or `MALLOC_MMAP_THRESHOLD_`.
Importing gpuwaste, any module of it, changes neither (a notebook or a Spark job keeps its own)."""

from __future__ import annotations

import os
import pkgutil
import subprocess
import tomllib

import pytest

import gpuwaste
from gpuwaste.process import ALLOCATOR_CONF, MMAP_THRESHOLD
from tests.conftest import REPO
from tests.support.interpreter import run_fresh

# What the console script pip writes for `gpuwaste` calls.
ENTRY_POINT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]["gpuwaste"]

# `gpuwaste ARGS` as its console script runs it, in this interpreter.
_RUN_COMMAND = """
import importlib, sys
module, _, function = {entry!r}.partition(":")
sys.argv = ["gpuwaste", *{args!r}]
try:
    getattr(importlib.import_module(module), function)()
except SystemExit:
    pass
"""

# Records the jemalloc options in the environment when polars is first imported (when jemalloc
# reads them), and adds stats_print so that jemalloc prints the options it runs with at exit.
_WATCH_POLARS = """
import importlib.abc, os, sys
class WatchPolars(importlib.abc.MetaPathFinder):
    seen = None
    def find_spec(self, name, path=None, target=None):
        if name == "polars" and WatchPolars.seen is None:
            WatchPolars.seen = os.environ.get("_RJEM_MALLOC_CONF", "")
            os.environ["_RJEM_MALLOC_CONF"] = ",".join(filter(None, [WatchPolars.seen, "stats_print:true"]))
        return None
sys.meta_path.insert(0, WatchPolars())
"""

_AFTER = """
import polars
polars.DataFrame({"a": range(1000)}).sum()
print("SEEN", WatchPolars.seen)
"""


def command(*args: str) -> str:
    return _RUN_COMMAND.format(entry=ENTRY_POINT, args=list(args))


def _run(
    code: str, conf: str | None, variable: str = "_RJEM_MALLOC_CONF"
) -> subprocess.CompletedProcess[str]:
    """`code` in a fresh interpreter whose environment sets the allocator `variable` to `conf`
    (None: leaves it unset, whatever this process has)."""
    env = {k: v for k, v in os.environ.items() if k != variable}
    if conf is not None:
        env[variable] = conf
    return run_fresh(code, env)


def _option(stderr: str, name: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip().startswith(name + ":")]
    assert lines, f"jemalloc printed no {name}: {stderr[:500]}"
    return lines[0].split()[1]


def _seen(stdout: str) -> str:
    return next(line for line in stdout.splitlines() if line.startswith("SEEN "))[5:]


@pytest.fixture(scope="module")
def command_options() -> subprocess.CompletedProcess[str]:
    """`gpuwaste --help` when the environment sets no jemalloc options."""
    return _run(_WATCH_POLARS + command("--help") + _AFTER, None)


def test_the_command_sets_the_options_before_polars_is_imported(
    command_options: subprocess.CompletedProcess[str],
) -> None:
    assert _seen(command_options.stdout) == ALLOCATOR_CONF


def test_polars_allocator_keeps_freed_pages_five_seconds(
    command_options: subprocess.CompletedProcess[str],
) -> None:
    stderr = command_options.stderr
    assert _option(stderr, "opt.dirty_decay_ms") == "5000"
    assert _option(stderr, "opt.muzzy_decay_ms") == "0"  # then gives them back at once
    assert _option(stderr, "opt.background_thread") == "true"


def test_polars_allocator_serves_large_blocks_from_one_arena(
    command_options: subprocess.CompletedProcess[str],
) -> None:
    assert _option(command_options.stderr, "opt.oversize_threshold") == "65536"  # jemalloc's: 8 MiB


def test_an_operators_own_setting_wins() -> None:
    stderr = _run(_WATCH_POLARS + command("--help") + _AFTER, "dirty_decay_ms:100").stderr
    assert _option(stderr, "opt.dirty_decay_ms") == "100"
    assert _option(stderr, "opt.muzzy_decay_ms") != "0"  # polars' own default, not gpuwaste's


# How many blocks glibc maps on their own for one 2 MiB malloc, after a 16 MiB block was freed
# (which, with glibc's dynamic threshold, raises the threshold to 16 MiB: the 2 MiB block would
# then come from the heap). `{before}` is filled in per test.
_MAPPED_2MIB = """
import ctypes
{before}
libc = ctypes.CDLL(None)
class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                              "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.free(libc.malloc(16 << 20))
before = libc.mallinfo2().hblks
block = libc.malloc(2 << 20)
print(libc.mallinfo2().hblks - before)
libc.free(block)
"""


def _mapped_2mib(before: str, threshold: str | None) -> int:
    code = _MAPPED_2MIB.format(before=before)
    return int(_run(code, threshold, "MALLOC_MMAP_THRESHOLD_").stdout.splitlines()[-1])


def test_glibc_maps_blocks_over_the_threshold_on_their_own_in_the_command() -> None:
    assert MMAP_THRESHOLD == 1 << 20
    assert _mapped_2mib(command("--help"), None) == 1
    # without the command's start, glibc's dynamic threshold puts the same block on the heap
    assert _mapped_2mib("", None) == 0


def test_an_operators_own_mmap_threshold_wins() -> None:
    assert _mapped_2mib(command("--help"), str(32 << 20)) == 0


# Every module of the package, but the Streamlit scripts, which run their page when imported.
_SCRIPTS = ("gpuwaste.dashboard.app", "gpuwaste.dashboard.views.")
MODULES = sorted(
    info.name
    for info in pkgutil.walk_packages(gpuwaste.__path__, "gpuwaste.")
    if not info.name.startswith(_SCRIPTS) and info.name != "gpuwaste.__main__"
)

_IMPORT_ALL = """
import importlib, os
for name in {modules!r}:
    importlib.import_module(name)
"""

# polars sets its own jemalloc defaults in the environment when imported, and Streamlit sets
# MPLBACKEND: imported before the environment is compared, what is left to see is gpuwaste's.
_ENVIRONMENT_UNCHANGED = """
import os, polars, streamlit
environ = dict(os.environ)
{imports}
assert dict(os.environ) == environ, set(os.environ.items()) ^ set(environ.items())
print("UNCHANGED")
"""


def test_importing_any_module_sets_no_allocator() -> None:
    assert "gpuwaste.analyses.engines.spark" in MODULES and "gpuwaste.cli" in MODULES
    imported = _IMPORT_ALL.format(modules=MODULES)
    assert _mapped_2mib(imported, None) == 0
    done = _run(_WATCH_POLARS + imported + _AFTER, None)
    assert _seen(done.stdout) == ""  # polars was first imported by a module of gpuwaste
    assert _option(done.stderr, "opt.oversize_threshold") != "65536"


def test_importing_any_module_changes_no_environment_variable() -> None:
    code = _ENVIRONMENT_UNCHANGED.format(imports=_IMPORT_ALL.format(modules=MODULES))
    assert run_fresh(code).stdout.splitlines()[-1] == "UNCHANGED"
