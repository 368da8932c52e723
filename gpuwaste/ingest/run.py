"""Run ingest sources under the writer lock, then refresh the catalog of views."""

from __future__ import annotations

import sys

from gpuwaste.config import ClusterConfig, Settings
from gpuwaste.errors import GpuwasteError
from gpuwaste.ingest.base import SOURCES, IngestResult, sources_in_order
from gpuwaste.warehouse.catalog import refresh_catalog
from gpuwaste.warehouse.diagnose import why_no_gpu_time
from gpuwaste.warehouse.lock import writer_lock
from gpuwaste.warehouse.schema import FACT_TABLES
from gpuwaste.warehouse.store import Warehouse


def _load_sources() -> None:
    """Import the ingestor modules so that they register themselves."""
    import gpuwaste.ingest.sources  # noqa: F401


def explain_no_gpu_time(settings: Settings, result: IngestResult) -> None:
    """After a run that wrote jobs: if the cluster's jobs can give no GPU time, the summary line
    says why (`warehouse.diagnose`)."""
    if not result.written.get("jobs"):
        return
    why = why_no_gpu_time(Warehouse(settings.data_dir), result.cluster)
    if why is not None:
        result.note = f"{result.note}; {why}" if result.note else why


def run_one(settings: Settings, cluster: ClusterConfig, source: str, quiet: bool) -> IngestResult:
    """One source for one cluster (the one-off form: `gpuwaste ingest SOURCE --flags`)."""
    _load_sources()
    _, runner = SOURCES[source]
    with writer_lock(settings.data_dir):
        Warehouse(settings.data_dir).remove_temp_files(FACT_TABLES)
        try:
            result = runner(settings, cluster, quiet)
            explain_no_gpu_time(settings, result)
        finally:
            refresh_catalog(settings.data_dir)
    print(result.summary(), file=sys.stderr if quiet else sys.stdout)
    return result


def run_configured(
    settings: Settings, sources: list[str] | None = None, quiet: bool = False
) -> list[IngestResult]:
    """Every configured source of every cluster (or only `sources`); a failing source does not
    stop the others, but the run ends in an error naming each failure."""
    _load_sources()
    if not settings.clusters:
        where = settings.source_path or "no configuration file"
        raise GpuwasteError(
            f"no clusters configured ({where}): give a gpuwaste.toml with [[clusters]], or run a "
            "source one-off, e.g. `gpuwaste ingest prometheus --url URL --cluster NAME`."
        )
    unknown = sorted(set(sources or []) - set(SOURCES))
    if unknown:
        raise GpuwasteError(f"unknown source '{unknown[0]}' (known: {', '.join(sorted(SOURCES))}).")
    results: list[IngestResult] = []
    failures: list[str] = []
    with writer_lock(settings.data_dir):
        Warehouse(settings.data_dir).remove_temp_files(FACT_TABLES)
        try:
            for cluster in settings.clusters:
                for name in sources_in_order():
                    configured, runner = SOURCES[name]
                    if (sources and name not in sources) or not configured(cluster):
                        continue
                    try:
                        result = runner(settings, cluster, quiet)
                        explain_no_gpu_time(settings, result)
                    except GpuwasteError as exc:
                        failures.append(f"{cluster.name}/{name}: {exc}")
                        print(f"gpuwaste: {cluster.name}/{name}: {exc}", file=sys.stderr)
                        continue
                    results.append(result)
                    print(result.summary(), file=sys.stderr if quiet else sys.stdout)
        finally:
            refresh_catalog(settings.data_dir)
    if failures:
        raise GpuwasteError(f"{len(failures)} source(s) failed; first: {failures[0]}")
    if not results and not quiet:
        print("nothing to ingest: no configured source matched.")
    return results
