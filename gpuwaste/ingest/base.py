"""What every source shares: its result, its error, and the options of a run.

A source is three layers (style.md), one sub-package each (`ingest/prometheus/`, `ingest/slurm/`,
...): a pure parser (text or JSON -> typed rows + refused records), a `source` module that does
the I/O (a file read, an HTTP call, a subprocess) and the writes, advancing the watermark only
after the data is durably written, and a `cli` module with its `gpuwaste ingest` subcommand. The
list of sources is `ingest/sources.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from gpuwaste.config import ClusterConfig, Settings
from gpuwaste.errors import GpuwasteError
from gpuwaste.warehouse.bookkeeping import Refused, summarize_refused

if TYPE_CHECKING:
    import typer


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
    # refused records by reason, when `refused` holds only the first ones (a file of garbage)
    refused_by_reason: dict[str, int] | None = None

    def summary(self) -> str:
        counts = summarize_refused(self.accepted, self.refused, self.refused_by_reason)
        line = f"{self.cluster}/{self.source}: {counts}"
        return f"{line}; {self.note}" if self.note else line


@dataclass(frozen=True)
class RunOptions:
    """What the command line says about one run, passed to every source's runner.

    `quiet`: no progress display (the summary line goes to stderr). `since` / `until` bound the
    time range of a source that reads one (Prometheus); the file sources read their whole input
    and ignore them. `telemetry`: the GPU telemetry dialect the telemetry sources read
    (`--telemetry`, over the cluster's `telemetry`)."""

    quiet: bool = False
    since: datetime | None = None
    until: datetime | None = None
    telemetry: str | None = None


Runner = Callable[[Settings, ClusterConfig, RunOptions], IngestResult]


@dataclass(frozen=True)
class Source:
    """One source, as `ingest/sources.py` declares it."""

    name: str  # the subcommand, and the `source` of the rows it writes
    config_key: str  # the table of a cluster that configures it: [clusters.<config_key>]
    run: Runner  # ingest one configured cluster
    register_cli: Callable[[typer.Typer, Source], None]  # add `gpuwaste ingest <name>`
    shows_progress: bool = False  # shows its own progress display (else `ingest.run` shows one)

    def configured(self, cluster: ClusterConfig) -> bool:
        return getattr(cluster, self.config_key) is not None
