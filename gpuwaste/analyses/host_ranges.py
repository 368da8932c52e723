"""The host ranges a batch's per-GPU pass runs over, cut by the samples they read.

A range's frames are the largest of a run (their sizes: docs/history/bench-analyze.md, "Host
ranges cut by samples"), so a range must not grow with the shape of the cluster: a host of 8
MIG GPUs split 7 ways is 56 devices, and a site that scrapes every 5 s keeps 3 samples where the
benchmark keeps one. A range is therefore at most `max_hosts` consecutive hosts (by name: sample
files are sorted by host, so a range reads only its own row groups) and at most `max_samples`
samples, whichever comes first; a host whose samples alone pass the bound is a range of its own.

A range's samples are not known before they are read, so they are foreseen from the ranges
already read: each host costs (its allocated devices) x (the seconds from its first allocation's
start to its last one's end: the span `job_samples.read` reads), and the batch's samples per
unit of cost so far say what the next hosts will read. The first range of a batch, with nothing
read yet, is one host. The cut depends only on the data, never on timing, so a batch reads the
same ranges every run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

# At most this many samples per host range, foreseen (above). The benchmark's ranges of 8 hosts
# of 8 GPUs over a week read up to 2.8 M samples (bench/RESULTS.md), which this leaves whole.
RANGE_MAX_SAMPLES = 3_000_000


def host_costs(alloc: pl.DataFrame) -> pl.DataFrame:
    """Per host of `alloc` (allocations: host, gpu, gpu_instance, start_ts, end_ts), in name
    order: its allocated devices of known GPU times the seconds their allocations span, the span
    `job_samples.read` reads (a GPU index of -1 reads nothing: a host of only those costs 0)."""
    known = pl.col("gpu") >= 0
    return (
        alloc.group_by("host")
        .agg(
            pl.struct("gpu", "gpu_instance").filter(known).n_unique().alias("devices"),
            (pl.col("end_ts").filter(known).max() - pl.col("start_ts").filter(known).min())
            .dt.total_seconds(fractional=True)
            .alias("span_s"),
        )
        .select("host", (pl.col("devices") * pl.col("span_s")).fill_null(0.0).alias("cost"))
        .sort("host")
    )


@dataclass
class HostRanges:
    """The ranges over `hosts` (in name order, each with its `costs`), one at a time: `next`
    gives the next range, `read` tells how many samples a range read."""

    hosts: list[str]
    costs: list[float]
    max_hosts: int
    max_samples: int = RANGE_MAX_SAMPLES
    _start: int = 0
    _samples: int = 0
    _cost: float = 0.0
    _last: dict[tuple[str, str], float] = field(default_factory=dict)

    @classmethod
    def of(
        cls, alloc: pl.DataFrame, max_hosts: int, max_samples: int = RANGE_MAX_SAMPLES
    ) -> HostRanges:
        costs = host_costs(alloc)
        return cls(costs["host"].to_list(), costs["cost"].to_list(), max_hosts, max_samples)

    def _end(self) -> int:
        """Where the range that starts at `_start` ends (exclusive)."""
        if self._cost <= 0:  # nothing read yet (or only hosts of no cost): one host
            return self._start + 1
        per_cost = self._samples / self._cost
        end, foreseen = self._start, 0.0
        while end < len(self.hosts) and end - self._start < self.max_hosts:
            foreseen += self.costs[end] * per_cost
            if end > self._start and foreseen > self.max_samples:
                break
            end += 1
        return end

    def next(self) -> tuple[str, str] | None:
        """The next range (first and last host, inclusive), or None after the last one."""
        if self._start >= len(self.hosts):
            return None
        end = self._end()
        host_range = (self.hosts[self._start], self.hosts[end - 1])
        self._last[host_range] = sum(self.costs[self._start : end])
        self._start = end
        return host_range

    def read(self, host_range: tuple[str, str], samples: int) -> None:
        """Range `host_range` (given by `next`) read `samples` samples."""
        self._samples += samples
        self._cost += self._last.pop(host_range)


__all__ = ["RANGE_MAX_SAMPLES", "HostRanges", "host_costs"]
