"""The sources of `gpuwaste ingest`, in the order a run of every source takes them.

Adding a source: a sub-package with its `parse`, `source` (with the runner) and `cli` modules, a
table in `config.ClusterConfig`, and one line here. Nothing registers itself on import.

Telemetry comes first, so that a scheduler source can take GPU indices from the samples' job
labels; the tables come out the same in any order (`job_precedence`, `gpu_indices`).
"""

from __future__ import annotations

from gpuwaste.ingest.base import Source
from gpuwaste.ingest.philly import cli as philly_cli
from gpuwaste.ingest.philly.source import run_philly
from gpuwaste.ingest.prometheus import cli as prometheus_cli
from gpuwaste.ingest.prometheus.openmetrics_source import run_openmetrics
from gpuwaste.ingest.prometheus.source import run_prometheus
from gpuwaste.ingest.slurm import cli as slurm_cli
from gpuwaste.ingest.slurm.source import run_slurm
from gpuwaste.ingest.tabular import cli as tabular_cli
from gpuwaste.ingest.tabular.source import run_csv, run_parquet

# name (subcommand), [clusters.<config key>], runner, its subcommand; Prometheus draws its own
# progress bar (of query windows)
SOURCES: tuple[Source, ...] = (
    Source(
        "prometheus",
        "prometheus",
        run_prometheus,
        prometheus_cli.register_prometheus,
        shows_progress=True,
    ),
    Source("openmetrics", "openmetrics", run_openmetrics, prometheus_cli.register_openmetrics),
    Source("slurm", "slurm", run_slurm, slurm_cli.register),
    Source("philly", "philly", run_philly, philly_cli.register),
    Source("csv", "csv", run_csv, tabular_cli.register),
    Source("parquet", "parquet", run_parquet, tabular_cli.register),
)
