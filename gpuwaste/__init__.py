"""gpuwaste: where do a shared GPU cluster's GPU hours go?"""

import ctypes
import os
import sys

__version__ = "0.1.0"

# polars allocates through its own jemalloc, configured by `_RJEM_MALLOC_CONF` when it is first
# imported. Its defaults give freed pages back to the kernel after 0.5 s (dirty) and 1 s (muzzy),
# so the analyses, which free and allocate frames of a million rows step after step, took a page
# fault for every page again: `gpuwaste analyze` spent almost a quarter of its CPU time in the
# kernel.
# Keeping freed pages 5 s, and purging them from jemalloc's background thread rather than on
# the next allocation, cut that in half (bench/RESULTS.md, "The allocator"). After those 5 s a
# page is given back at once (muzzy_decay_ms 0): with 5 s more as a "muzzy" page (MADV_FREE,
# still counted in the process's RSS until the kernel needs it) the peak was 0.03-0.08 GiB higher
# at 1x, 8x and 16x for no time gained (bench/RESULTS.md, "The run's own steps capped").
# Requests of 64 KiB and more (a column of a host range's frames is 0.1-20 MB) come from
# jemalloc's one dedicated "oversize" arena rather than from the 8 arenas polars' threads share
# (jemalloc's threshold is 8 MiB): the peak was 0.05-0.10 GiB lower at 1x, 8x and 16x for no
# time lost (bench/RESULTS.md, "One arena for large blocks"). An operator's own setting wins;
# this runs before any module of the package imports polars.
ALLOCATOR_CONF = (
    "background_thread:true,dirty_decay_ms:5000,muzzy_decay_ms:0,oversize_threshold:65536"
)
os.environ.setdefault("_RJEM_MALLOC_CONF", ALLOCATOR_CONF)

# numpy's arrays, numba's and DuckDB's other allocations go through glibc's malloc, which by
# default raises its mmap threshold to the largest block freed so far (up to 32 MiB). Arrays of
# a host range (2.5 M rows: 2.5-20 MB each) then came from the heaps, whose freed holes stayed
# resident and grew with every host range a run visits: at 8x the heaps held 0.2-0.5 GiB free,
# and the peak rose batch after batch. A fixed threshold of 1 MiB maps each larger block on its
# own and gives it back when freed: the 4x and 8x peaks fell 0.1-0.15 GiB for 1-4 % more time;
# 64 KiB took 10 % more (bench/RESULTS.md, "The run's own steps capped"). An operator's own
# MALLOC_MMAP_THRESHOLD_ (read by glibc at start) wins.
MMAP_THRESHOLD = 1 << 20


def _fix_mmap_threshold() -> None:
    """glibc's M_MMAP_THRESHOLD set to MMAP_THRESHOLD (which also turns off its dynamic
    raising), unless the environment sets one; nothing where the C library is not glibc."""
    if "MALLOC_MMAP_THRESHOLD_" in os.environ or sys.platform != "linux":
        return
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return
    m_mmap_threshold = -3  # <malloc.h>
    mallopt(ctypes.c_int(m_mmap_threshold), ctypes.c_int(MMAP_THRESHOLD))


_fix_mmap_threshold()
