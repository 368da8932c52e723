"""Run ingest sources under the writer lock, then refresh the catalog of views.

Every subcommand behaves alike: given its input flags it runs one-off (`run_one`); given none, it
runs its source for the configured clusters (`run_configured`): with `--cluster NAME` for that
cluster only (an error if NAME does not configure the source), without it for every cluster that
configures the source. Each finished source prints one summary line: on stdout, or on stderr with
`--quiet` (which also hides the progress display).
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path

from gpuwaste.config import ClusterConfig, Settings
from gpuwaste.errors import DiskError, GpuwasteError
from gpuwaste.ingest.base import IngestResult, RunOptions, Source
from gpuwaste.ingest.progress import source_progress
from gpuwaste.ingest.staging import remove_leftovers
from gpuwaste.warehouse.catalog import refresh_catalog
from gpuwaste.warehouse.diagnose import problems
from gpuwaste.warehouse.lock import writer_lock
from gpuwaste.warehouse.schema import FACT_TABLES
from gpuwaste.warehouse.store import Warehouse


def explain_no_gpu_time(settings: Settings, result: IngestResult) -> None:
    """After a run that wrote jobs: if the cluster's jobs can give no GPU time, or many of their
    allocations meet no sample as when the times were read in the wrong zone, the summary line
    says so (`warehouse.diagnose`)."""
    if not result.written.get("jobs"):
        return
    for why in problems(Warehouse(settings.data_dir), result.cluster):
        result.note = f"{result.note}; {why}" if result.note else why


def _run_source(
    settings: Settings, cluster: ClusterConfig, source: Source, options: RunOptions
) -> IngestResult:
    """One source for one cluster, with a progress display unless the source shows its own;
    prints the summary line."""
    if source.shows_progress:
        result = source.run(settings, cluster, options)
    else:
        with source_progress(f"{cluster.name} {source.name}", options.quiet):
            result = source.run(settings, cluster, options)
    explain_no_gpu_time(settings, result)
    print(result.summary(), file=sys.stderr if options.quiet else sys.stdout)
    return result


def _first_missing(path: Path) -> Path | None:
    """The outermost folder of `path` (itself included) that does not exist yet, or None."""
    missing = None
    for p in (path, *path.parents):
        if p.exists():
            break
        missing = p
    return missing


@contextmanager
def no_empty_warehouse_left(data_dir: Path) -> Iterator[None]:
    """A run that fails removes the folders it created for a warehouse that holds no data then
    (a first ingest from an unreachable server), so that the next command does not take an
    empty warehouse for one; a folder that existed before is never touched."""
    created = _first_missing(data_dir)
    try:
        yield
    except BaseException:
        if created is not None and not any((data_dir / "parquet").rglob("*.parquet")):
            shutil.rmtree(created, ignore_errors=True)
        raise


@contextmanager
def catalog_refreshed(data_dir: Path) -> Iterator[None]:
    """Refresh the catalog of views after the block, after a failure too; a refresh that fails
    then (the same full disk, most likely) leaves the old catalog and does not hide the block's
    own error behind its own."""
    try:
        yield
    except BaseException:
        with suppress(GpuwasteError):
            refresh_catalog(data_dir)
        raise
    refresh_catalog(data_dir)


def run_one(
    settings: Settings, cluster: ClusterConfig, source: Source, options: RunOptions
) -> IngestResult:
    """One source for one cluster (the one-off form: `gpuwaste ingest SOURCE --flags`)."""
    with (
        no_empty_warehouse_left(settings.data_dir),
        writer_lock(settings.data_dir),
        catalog_refreshed(settings.data_dir),
    ):
        Warehouse(settings.data_dir).remove_temp_files(FACT_TABLES)
        remove_leftovers(settings.data_dir)
        return _run_source(settings, cluster, source, options)


def _clusters(
    settings: Settings, sources: Sequence[Source], cluster: str | None
) -> list[ClusterConfig]:
    """The configured clusters a run covers: all, or `cluster` alone, which must then configure
    each of `sources`."""
    if not settings.clusters:
        where = settings.source_path or "no configuration file"
        raise GpuwasteError(
            f"no clusters configured ({where}): give a gpuwaste.toml with [[clusters]], or run a "
            "source one-off, e.g. `gpuwaste ingest prometheus --url URL --cluster NAME`."
        )
    if cluster is None:
        return list(settings.clusters)
    selected = settings.cluster(cluster)
    for source in sources:
        if not source.configured(selected):
            raise GpuwasteError(
                f"cluster {cluster} has no [{source.config_key}] source configured "
                f"(in {settings.source_path or 'the configuration'})."
            )
    return [selected]


def run_configured(
    settings: Settings,
    sources: Sequence[Source],
    options: RunOptions | None = None,
    *,
    cluster: str | None = None,
) -> list[IngestResult]:
    """`sources` (every source: `ingest.sources.SOURCES`, which the caller passes, as that list
    names each source's command-line module, above this one) for every configured cluster that
    has them, or for `cluster` alone. A failing source does not stop the others, but the run
    ends in an error naming each failure."""
    options = options or RunOptions()
    clusters = _clusters(settings, sources, cluster)
    results: list[IngestResult] = []
    failures: list[str] = []
    with no_empty_warehouse_left(settings.data_dir):
        with writer_lock(settings.data_dir), catalog_refreshed(settings.data_dir):
            Warehouse(settings.data_dir).remove_temp_files(FACT_TABLES)
            remove_leftovers(settings.data_dir)
            for c in clusters:
                for source in sources:
                    if not source.configured(c):
                        continue
                    try:
                        results.append(_run_source(settings, c, source, options))
                    except DiskError as exc:  # every source after it would meet the same disk
                        raise DiskError(f"ingest stopped at {c.name}/{source.name}: {exc}") from exc
                    except GpuwasteError as exc:
                        failures.append(f"{c.name}/{source.name}: {exc}")
                        print(f"gpuwaste: {c.name}/{source.name}: {exc}", file=sys.stderr)
        if failures:
            raise GpuwasteError(f"{len(failures)} source(s) failed; first: {failures[0]}")
    if not results and not options.quiet:
        print("nothing to ingest: no configured source matched.")
    return results
