"""The sources of `gpuwaste ingest`, in the order a run of every source takes them.

Adding a source: a sub-package with its `parse`, `source` (with the runner) and `cli` modules, a
table in `config.ClusterConfig`, and one line here. Nothing registers itself on import. A
runner's module is named, not imported: it is imported when the source runs (`LazyRunner`).

Telemetry comes first, so that a scheduler source can take GPU indices from the samples' job
labels; the tables come out the same in any order (`job_precedence`, `gpu_indices`).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import TYPE_CHECKING

from gpuwaste.ingest.base import Runner, RunOptions, Source
from gpuwaste.ingest.logs import cli as logs_cli
from gpuwaste.ingest.philly import cli as philly_cli
from gpuwaste.ingest.prometheus import cli as prometheus_cli
from gpuwaste.ingest.slurm import cli as slurm_cli
from gpuwaste.ingest.tabular import cli as tabular_cli

if TYPE_CHECKING:
    from gpuwaste.config import ClusterConfig, Settings
    from gpuwaste.ingest.base import IngestResult


@dataclass(frozen=True)
class LazyRunner:
    """A source's runner named by its module and function, and imported when it first runs: the
    `gpuwaste` command (its help, `gpuwaste job`, ...) starts without the sources' parsers and
    HTTP clients (tests/test_cli_startup.py)."""

    module: str
    name: str

    def __call__(
        self, settings: Settings, cluster: ClusterConfig, options: RunOptions
    ) -> IngestResult:
        run: Runner = getattr(import_module(self.module), self.name)
        return run(settings, cluster, options)


# name (subcommand), [clusters.<config key>], runner, its subcommand; Prometheus draws its own
# progress bar (of query windows)
SOURCES: tuple[Source, ...] = (
    Source(
        "prometheus",
        "prometheus",
        LazyRunner("gpuwaste.ingest.prometheus.source", "run_prometheus"),
        prometheus_cli.register_prometheus,
        shows_progress=True,
    ),
    Source(
        "openmetrics",
        "openmetrics",
        LazyRunner("gpuwaste.ingest.prometheus.openmetrics_source", "run_openmetrics"),
        prometheus_cli.register_openmetrics,
    ),
    Source(
        "slurm",
        "slurm",
        LazyRunner("gpuwaste.ingest.slurm.source", "run_slurm"),
        slurm_cli.register,
    ),
    Source(
        "philly",
        "philly",
        LazyRunner("gpuwaste.ingest.philly.source", "run_philly"),
        philly_cli.register,
    ),
    Source(
        "csv", "csv", LazyRunner("gpuwaste.ingest.tabular.source", "run_csv"), tabular_cli.register
    ),
    Source(
        "parquet",
        "parquet",
        LazyRunner("gpuwaste.ingest.tabular.source", "run_parquet"),
        tabular_cli.register,
    ),
    # after the schedulers: a log names a job they wrote (the analysis joins them, in any order)
    Source(
        "logs", "logs", LazyRunner("gpuwaste.ingest.logs.source", "run_logs"), logs_cli.register
    ),
)
