"""GPU sample rows of one host, as an ingest would store them (for warehouse tests)."""

from __future__ import annotations

from datetime import datetime, timedelta

import polars as pl


def samples(
    start: datetime, n: int, gpus: int = 2, step_s: int = 15, util: float = 50.0
) -> pl.DataFrame:
    """`n` samples per GPU of host node1, every `step_s` from `start`, all at `util`."""
    rows = [
        {
            "host": "node1",
            "gpu": g,
            "ts": start + timedelta(seconds=step_s * i),
            "util": util,
            "mem_used_mib": 1000.0,
            "mem_total_mib": 81920.0,
            "source": "test",
        }
        for g in range(gpus)
        for i in range(n)
    ]
    return pl.DataFrame(rows)
