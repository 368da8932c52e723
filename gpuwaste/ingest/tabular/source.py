"""Generic CSV / parquet exports: read the files, map them (`tabular.parse`), write the warehouse.

Samples replace the window [first ts, last ts] of `gpu_samples` for source `csv`/`parquet`; jobs
are upserted by job_id and their `job_gpus` rows replaced. A samples file is read in batches of
`BATCH_ROWS` rows, mapped, staged by day (`ingest.staging`) and written a day at a time once the
whole file is read (an error before that writes nothing), so its size does not bound memory; a
jobs file is read whole, within `[files] max_read_whole_mib`.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl

from gpuwaste.config import ClusterConfig, CsvSource, FileLimits, Settings
from gpuwaste.ingest.base import IngestError, IngestResult, RunOptions
from gpuwaste.ingest.files import check_read_whole
from gpuwaste.ingest.gpu_indices import fill_unknown_gpus
from gpuwaste.ingest.job_precedence import yield_label_jobs
from gpuwaste.ingest.staging import replace_by_day, stage, staging_folder
from gpuwaste.ingest.tabular.parse import (
    Kind,
    Mapping,
    MappingError,
    csv_batches,
    load_mapping,
    map_jobs,
    map_samples,
    split_csv,
)
from gpuwaste.ingest.times import TimeBounds, conflicting_duplicates, refuse_duplicates
from gpuwaste.warehouse import gpu_from
from gpuwaste.warehouse.bookkeeping import Refused, write_quarantine
from gpuwaste.warehouse.store import Warehouse

BATCH_ROWS = 500_000  # samples mapped at once


def sample_batches(
    path: Path, kind: Kind, batch_rows: int = BATCH_ROWS
) -> Iterator[tuple[pl.DataFrame, pl.Expr, list[Refused]]]:
    """The samples file in batches of rows, as `read_table` gives a whole file."""
    if not path.is_file():
        raise IngestError(f"{kind} input {path} does not exist.")
    if kind == "csv":
        try:
            with open(path, encoding="utf-8") as fh:  # newlines as read_text reads them
                yield from csv_batches(fh, str(path), batch_rows)
        except UnicodeDecodeError as exc:
            raise IngestError(
                f"{path} is not a readable csv file (not UTF-8 text: {exc.reason})."
            ) from None
        return
    try:
        rows = pl.scan_parquet(path).select(pl.len()).collect().item()
    except Exception as exc:  # polars raises several kinds for a wrong file
        raise _not_readable(path, kind, exc) from None
    for offset in range(0, max(rows, 1), batch_rows):
        df = pl.scan_parquet(path).slice(offset, batch_rows).collect()
        number = pl.int_range(pl.len()) + 1 + offset
        yield df, pl.lit("row ") + number.cast(pl.String), []


def _not_readable(path: Path, kind: Kind, exc: Exception) -> IngestError:
    first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
    return IngestError(f"{path} is not a readable {kind} file ({first}).")


def read_table(
    path: Path, kind: Kind, limits: FileLimits
) -> tuple[pl.DataFrame, pl.Expr, list[Refused]]:
    """The input file (read whole: within `[files] max_read_whole_mib`), an expression giving
    each row's location (line or row number), and the records refused while reading it."""
    if not path.is_file():
        raise IngestError(f"{kind} input {path} does not exist.")
    check_read_whole(path, kind, limits)
    if kind == "csv":
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise IngestError(
                f"{path} is not a readable csv file (not UTF-8 text: {exc.reason})."
            ) from None
        return split_csv(text, str(path))
    try:
        df = pl.read_parquet(path)
        return df, pl.lit("row ") + (pl.int_range(pl.len()) + 1).cast(pl.String), []
    except Exception as exc:  # polars raises several kinds for a wrong file
        raise _not_readable(path, kind, exc) from None


def ingest_tabular(
    settings: Settings, cluster: ClusterConfig, kind: Kind, *, batch_rows: int = BATCH_ROWS
) -> IngestResult:
    cfg: CsvSource | None = cluster.csv if kind == "csv" else cluster.parquet
    if cfg is None:
        raise IngestError(f"cluster '{cluster.name}' has no [{kind}] source configured.")
    if cfg.samples is None and cfg.jobs is None:
        raise IngestError(f"cluster '{cluster.name}': the {kind} source needs `samples` or `jobs`.")
    if not cfg.mapping.is_file():
        raise IngestError(f"mapping file {cfg.mapping} does not exist.")
    try:
        mapping = load_mapping(cfg.mapping.read_text(encoding="utf-8"))
    except MappingError as exc:
        raise IngestError(f"mapping file {cfg.mapping}: {exc}.") from None
    if cfg.samples is not None and mapping.samples is None:
        raise IngestError(f"mapping file {cfg.mapping} has no [samples] table for {cfg.samples}.")
    if cfg.jobs is not None and mapping.jobs is None:
        raise IngestError(f"mapping file {cfg.mapping} has no [jobs] table for {cfg.jobs}.")
    with staging_folder(settings.data_dir, kind) as staged:
        return _ingest(settings, cluster, kind, cfg, mapping, staged, batch_rows)


def _ingest(
    settings: Settings,
    cluster: ClusterConfig,
    kind: Kind,
    cfg: CsvSource,
    mapping: Mapping,
    staged: Path,
    batch_rows: int,
) -> IngestResult:
    # Read and map everything before writing anything; samples staged by day.
    bounds: tuple[datetime, datetime] | None = None
    jobs: pl.DataFrame | None = None
    job_gpus: pl.DataFrame | None = None
    refused: dict[str, list[Refused]] = {}
    accepted = 0
    times = TimeBounds.at(datetime.now(UTC), settings.ingest)
    try:
        if cfg.samples is not None and mapping.samples is not None:
            refused[str(cfg.samples)] = []
            batches = sample_batches(cfg.samples, kind, batch_rows)
            for part, (df, loc, bad) in enumerate(batches):
                good, r = map_samples(df, mapping.samples, str(cfg.samples), loc, times)
                refused[str(cfg.samples)] += bad + r
                accepted += good.height
                if good.height:
                    lo, hi = good["ts"].min(), good["ts"].max()
                    assert isinstance(lo, datetime) and isinstance(hi, datetime)
                    if bounds is not None:
                        lo, hi = min(bounds[0], lo), max(bounds[1], hi)
                    bounds = (lo, hi)
                stage(good, staged, part)
        if cfg.jobs is not None and mapping.jobs is not None:
            df, loc, bad = read_table(cfg.jobs, kind, settings.files)
            jobs, job_gpus, r = map_jobs(df, mapping.jobs, str(cfg.jobs), loc, times)
            refused[str(cfg.jobs)] = bad + r
            accepted += df.height - len(r)
    except MappingError as exc:
        raise IngestError(f"{exc} ({cfg.mapping}).") from None
    wh = Warehouse(settings.data_dir)
    written: dict[str, int] = {}
    if bounds is not None:
        window = (bounds[0], bounds[1] + timedelta(microseconds=1))
        key, values = ["host", "gpu", "job_id", "ts"], ["util", "mem_used_mib", "mem_total_mib"]
        duplicates: list[Refused] = []

        def prepare(samples: pl.DataFrame) -> pl.DataFrame:
            # a (host, gpu, ts, job) given twice: the last in the file (its day's last) wins, and
            # a left-out reading of another value is refused
            samples, others = conflicting_duplicates(samples, key, values, keep="last")
            duplicates.extend(refuse_duplicates(others, key, values, kind, keep="last"))
            return samples.with_columns(
                pl.lit(kind).alias("source"), pl.lit(f"{kind}_util").alias("util_source")
            )

        written["gpu_samples"] = replace_by_day(
            wh, "gpu_samples", cluster.name, staged, window, kind, prepare
        )
        fill_unknown_gpus(wh, cluster.name, *window)
        refused[str(cfg.samples)] += duplicates
        accepted -= len(duplicates)
    if jobs is not None and jobs.height and job_gpus is not None:
        written["jobs"] = wh.upsert(
            "jobs", cluster.name, kind, jobs.with_columns(pl.lit(kind).alias("source"))
        )
        written["job_gpus"] = wh.replace_rows_where(
            "job_gpus",
            cluster.name,
            kind,
            pl.col("job_id").is_in(jobs["job_id"].implode()),
            job_gpus.with_columns(
                pl.when(pl.col("gpu") >= 0)
                .then(pl.lit(gpu_from.EXPORT))
                .otherwise(pl.lit(gpu_from.UNKNOWN))
                .alias("gpu_from")
            ),
        )
        yield_label_jobs(wh, cluster.name)
    all_refused: list[Refused] = []
    for batch, r in refused.items():
        write_quarantine(wh, cluster.name, kind, batch, r)
        all_refused.extend(r)
    note = ", ".join(f"{n} {t} rows written" for t, n in written.items())
    return IngestResult(
        source=kind,
        cluster=cluster.name,
        accepted=accepted,
        refused=all_refused,
        written=written,
        note=note,
    )


def run_csv(settings: Settings, cluster: ClusterConfig, options: RunOptions) -> IngestResult:
    """The configured CSV files of `cluster` (its runner in `ingest.sources`)."""
    return ingest_tabular(settings, cluster, "csv")


def run_parquet(settings: Settings, cluster: ClusterConfig, options: RunOptions) -> IngestResult:
    """The configured parquet files of `cluster` (its runner in `ingest.sources`)."""
    return ingest_tabular(settings, cluster, "parquet")
