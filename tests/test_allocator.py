"""The allocator settings of `gpuwaste/__init__.py`: polars' jemalloc keeps freed pages 5 s, then
gives them back (bench/RESULTS.md, "The allocator"), and serves requests of 64 KiB and more from
one arena ("One arena for large blocks"), in effect in polars when it is imported after
gpuwaste; glibc maps blocks of 1 MiB and more on their own (bench/RESULTS.md, "The run's own
steps capped"); neither in place of an operator's own `_RJEM_MALLOC_CONF` or
`MALLOC_MMAP_THRESHOLD_`."""

from __future__ import annotations

import os
import subprocess

import pytest

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


def test_importing_gpuwaste_does_not_import_polars_first() -> None:
    done = _run("import sys, gpuwaste; print('polars' in sys.modules)", None)
    assert done.stdout.strip() == "False"


@pytest.fixture(scope="module")
def default_options() -> str:
    """What jemalloc prints of its options when the environment sets none (gpuwaste's)."""
    return _run(_PRINT_OPTIONS, None).stderr


def test_polars_allocator_keeps_freed_pages_five_seconds(default_options: str) -> None:
    assert _option(default_options, "opt.dirty_decay_ms") == "5000"
    assert _option(default_options, "opt.muzzy_decay_ms") == "0"  # then gives them back at once
    assert _option(default_options, "opt.background_thread") == "true"
    assert gpuwaste.ALLOCATOR_CONF.startswith("background_thread:true")


def test_polars_allocator_serves_large_blocks_from_one_arena(default_options: str) -> None:
    assert _option(default_options, "opt.oversize_threshold") == "65536"  # jemalloc's: 8388608


def test_an_operators_own_setting_wins() -> None:
    stderr = _run(_PRINT_OPTIONS, "dirty_decay_ms:100").stderr
    assert _option(stderr, "opt.dirty_decay_ms") == "100"
    assert _option(stderr, "opt.muzzy_decay_ms") != "0"  # polars' own default, not gpuwaste's


# How many blocks glibc maps on their own for one 2 MiB malloc, after a 16 MiB block was freed
# (which, with glibc's dynamic threshold, raises the threshold to 16 MiB: the 2 MiB block would
# then come from the heap). `{imports}` is filled in per test.
_MAPPED_2MIB = """
import ctypes
{imports}
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


def _mapped_2mib(imports: str, threshold: str | None) -> int:
    code = _MAPPED_2MIB.format(imports=imports)
    return int(_run(code, threshold, "MALLOC_MMAP_THRESHOLD_").stdout)


def test_glibc_maps_blocks_over_the_threshold_on_their_own_after_importing_gpuwaste() -> None:
    assert gpuwaste.MMAP_THRESHOLD == 1 << 20
    assert _mapped_2mib("import gpuwaste", None) == 1
    # without gpuwaste, glibc's dynamic threshold puts the same block on the heap
    assert _mapped_2mib("", None) == 0


def test_an_operators_own_mmap_threshold_wins() -> None:
    assert _mapped_2mib("import gpuwaste", str(32 << 20)) == 0
