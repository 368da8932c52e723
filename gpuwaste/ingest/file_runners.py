"""Source runners registered with gpuwaste.ingest.base.register_source: slurm, philly, csv, parquet."""

from __future__ import annotations

from gpuwaste.config import ClusterConfig, Settings
from gpuwaste.ingest.base import IngestResult, register_source


@register_source("slurm", lambda c: c.slurm is not None)
def run_slurm(settings: Settings, cluster: ClusterConfig, quiet: bool) -> IngestResult:
    from gpuwaste.ingest.slurm_source import ingest_slurm

    return ingest_slurm(settings, cluster)


@register_source("philly", lambda c: c.philly is not None)
def run_philly(settings: Settings, cluster: ClusterConfig, quiet: bool) -> IngestResult:
    from gpuwaste.ingest.philly_source import ingest_philly

    return ingest_philly(settings, cluster)


@register_source("csv", lambda c: c.csv is not None)
def run_csv(settings: Settings, cluster: ClusterConfig, quiet: bool) -> IngestResult:
    from gpuwaste.ingest.tabular import ingest_tabular

    return ingest_tabular(settings, cluster, "csv")


@register_source("parquet", lambda c: c.parquet is not None)
def run_parquet(settings: Settings, cluster: ClusterConfig, quiet: bool) -> IngestResult:
    from gpuwaste.ingest.tabular import ingest_tabular

    return ingest_tabular(settings, cluster, "parquet")
