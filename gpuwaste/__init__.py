"""gpuwaste: where do a shared GPU cluster's GPU hours go?"""

import os

__version__ = "0.1.0"

# polars allocates through its own jemalloc, configured by `_RJEM_MALLOC_CONF` when it is first
# imported. Its defaults give freed pages back to the kernel after 0.5 s (dirty) and 1 s (muzzy),
# so the analyses, which free and allocate frames of a million rows step after step, took a page
# fault for every page again: `gpuwaste analyze` spent almost a quarter of its CPU time in the
# kernel.
# Keeping freed pages 5 s, and purging them from jemalloc's background thread rather than on
# the next allocation, cut that in half (bench/RESULTS.md, "The allocator"). An operator's own
# setting wins; this runs before any module of the package imports polars.
ALLOCATOR_CONF = "background_thread:true,dirty_decay_ms:5000,muzzy_decay_ms:5000"
os.environ.setdefault("_RJEM_MALLOC_CONF", ALLOCATOR_CONF)
