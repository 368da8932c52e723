"""The memory allocators of a gpuwaste process, set where a process starts (the `gpuwaste`
command, `gpuwaste/__main__.py`; the dashboard's server; a Spark executor's task), never on
import: a notebook or a test that imports gpuwaste keeps its own allocators.

polars allocates through its own jemalloc, configured by `_RJEM_MALLOC_CONF` when polars is first
imported, so `configure_process` runs before anything imports polars. Its defaults give freed
pages back to the kernel within a second; the analyses free and allocate frames of a million
rows step after step and took a page fault for every page again. Freed pages are kept 5 s,
purged by jemalloc's background thread rather than on the next allocation, then given back at
once (muzzy_decay_ms 0: keeping them as MADV_FREE pages only raised the peak); requests of
64 KiB and more come from jemalloc's one "oversize" arena rather than from the arenas polars'
threads share, which lowered the peak (bench/RESULTS.md, "The allocator", "The run's own steps
capped", "One arena for large blocks").

numpy's arrays, numba's and DuckDB's other allocations go through glibc's malloc, which by
default raises its mmap threshold to the largest block freed so far: a host range's arrays then
came from the heaps, whose freed holes stayed resident and grew run after run. A fixed threshold
of 1 MiB maps each larger block on its own and gives it back when freed (bench/RESULTS.md, "The
run's own steps capped"). An operator's own `_RJEM_MALLOC_CONF` or `MALLOC_MMAP_THRESHOLD_` wins.
"""

from __future__ import annotations

import ctypes
import os
import sys

ALLOCATOR_ENV = "_RJEM_MALLOC_CONF"
ALLOCATOR_CONF = (
    "background_thread:true,dirty_decay_ms:5000,muzzy_decay_ms:0,oversize_threshold:65536"
)
MMAP_THRESHOLD_ENV = "MALLOC_MMAP_THRESHOLD_"  # read by glibc when the process starts
MMAP_THRESHOLD = 1 << 20

_threshold_fixed = False


def allocator_conf() -> str:
    """The jemalloc options a gpuwaste process runs with: the operator's own, else ours."""
    return os.environ.get(ALLOCATOR_ENV, ALLOCATOR_CONF)


def fix_mmap_threshold() -> None:
    """glibc's M_MMAP_THRESHOLD set to MMAP_THRESHOLD (which also turns off its dynamic
    raising), once per process, unless the environment sets one; nothing where the C library is
    not glibc."""
    global _threshold_fixed
    if _threshold_fixed or MMAP_THRESHOLD_ENV in os.environ or sys.platform != "linux":
        return
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return
    m_mmap_threshold = -3  # <malloc.h>
    mallopt(ctypes.c_int(m_mmap_threshold), ctypes.c_int(MMAP_THRESHOLD))
    _threshold_fixed = True


def configure_process() -> None:
    """Both allocators, at the start of a gpuwaste process, before polars is imported (the
    jemalloc options also reach the processes this one starts)."""
    os.environ.setdefault(ALLOCATOR_ENV, ALLOCATOR_CONF)
    fix_mmap_threshold()
