"""What every ingestor shares: its result, its error, and the registry of sources.

An ingestor is three layers (style.md): a pure parser (text or JSON -> typed rows + refused
records), one function that does the I/O (a file read, an HTTP call, a subprocess), and a runner
that joins them and writes to the warehouse, advancing the watermark only after the data is
durably written. A runner registers itself under its source name, so `gpuwaste ingest` with no
argument runs every source configured for every cluster.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from gpuwaste.config import ClusterConfig, Settings
from gpuwaste.errors import GpuwasteError
from gpuwaste.warehouse.bookkeeping import Refused, summarize_refused


class IngestError(GpuwasteError):
    """A source could not be read: one sentence naming the file or URL and the cause."""


@dataclass
class IngestResult:
    source: str
    cluster: str
    accepted: int = 0
    refused: list[Refused] = field(default_factory=list)
    written: dict[str, int] = field(default_factory=dict)  # table -> rows written
    note: str = ""

    def summary(self) -> str:
        line = f"{self.cluster}/{self.source}: {summarize_refused(self.accepted, self.refused)}"
        return f"{line}; {self.note}" if self.note else line


# source name -> (is it configured for this cluster?, run it)
Runner = Callable[[Settings, ClusterConfig, bool], IngestResult]  # (settings, cluster, quiet)
SOURCES: dict[str, tuple[Callable[[ClusterConfig], bool], Runner]] = {}
# Telemetry runs before scheduler records, so that a scheduler source can take GPU indices from
# the samples' job labels (Slurm's sacct knows hosts, not GPU indices).
TELEMETRY, SCHEDULER = 10, 20
_PRIORITY: dict[str, int] = {}


def register_source(
    name: str, configured: Callable[[ClusterConfig], bool], priority: int = SCHEDULER
) -> Callable[[Runner], Runner]:
    """Register a runner; `priority` orders a run of every source (TELEMETRY first)."""

    def deco(fn: Runner) -> Runner:
        SOURCES[name] = (configured, fn)
        _PRIORITY[name] = priority
        return fn

    return deco


def sources_in_order() -> list[str]:
    return sorted(SOURCES, key=lambda n: (_PRIORITY.get(n, SCHEDULER), n))
