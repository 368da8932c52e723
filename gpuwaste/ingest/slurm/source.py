"""The Slurm source: sacct output (a file, or a configured `sacct` command) -> `jobs`, `job_gpus`.

I/O and writes only; parsing is in `slurm.parse` and `slurm.scontrol_parse`; the GPU indices of a
host-only allocation in `gpu_indices`.

- **File** (`[clusters.slurm] file = ...` or `gpuwaste ingest slurm --file F`): the whole file is
  parsed; the quarantine batch is the file's path, so re-reading it replaces its refused rows.
- **Command** (`command = ["sacct", "--parsable2", "--allocations", "--format=..."]`): run over
  the window [watermark, now) with `-S`/`-E` appended, with `TZ=UTC` and
  `SLURM_TIME_FORMAT=standard` so that times print as ISO UTC times (never ambiguous at a
  fall-back); the first run reaches back `first_window_days`. The watermark advances to the window's end only after the writes.

Jobs are upserted by `job_id`: a job seen running and later completed is updated in place.

`job_gpus` (attempt 0, [start_ts, end_ts]; end null while running; a job requeued and read with
`sacct --duplicates`: one attempt per run, each run's state in `job_attempts`, `tie_runs` and
`earlier_runs`): the GPUs of each job come
from the evidence `gpu_indices` lists, in its order (a whole host, scontrol's IDX, the job's
Jobstats summary in the `AdminComment` column, whose minor numbers `summary_ties` maps to
indices, the samples' job labels), else one row per host with **gpu = -1, "index unknown"**.
A job's rows are replaced whole on every run, and a telemetry ingest that comes later fills
rows with gpu = -1 from the new samples' `hpc_job` labels (`fill_unknown_gpus`), so the indices
are the same whichever source arrived first. A job that holds no GPU (`gpus` = 0) has no rows.
Writing Slurm jobs removes the jobs derived from telemetry labels for the cluster
(`job_precedence`).

`job_gpu_summaries` (key `slurm`): the per-GPU figures of the jobs' Jobstats summaries, with the
index each GPU is tied to in `job_gpus`; a job's rows are replaced whole on every run, like its
`job_gpus` rows, so re-reading a file never duplicates them.
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl

from gpuwaste.config import ClusterConfig, FileLimits, Settings, SlurmSource
from gpuwaste.ingest.base import IngestError, IngestResult, RunOptions
from gpuwaste.ingest.files import read_whole
from gpuwaste.ingest.gpu_evidence import GresIdx
from gpuwaste.ingest.gpu_indices import (
    JOB_GPUS_KEY,
    Ties,
    host_gpus_from_samples,
    prune_minors,
    tie_jobs,
)
from gpuwaste.ingest.job_precedence import yield_label_jobs
from gpuwaste.ingest.slurm.captures import prune_captures, read_scontrol
from gpuwaste.ingest.slurm.command import run_command
from gpuwaste.ingest.slurm.parse import (
    SOURCE,
    SacctFormatError,
    SacctOptions,
    SacctParse,
    columns_from_command,
    parse_sacct,
)
from gpuwaste.ingest.slurm.summary_ties import summary_gpus
from gpuwaste.ingest.times import TimeBounds, latest_job_time
from gpuwaste.warehouse.bookkeeping import get_watermark, set_watermark, write_quarantine
from gpuwaste.warehouse.gpu_from import GPU_FROM_VALUES, JOBSTATS_SUMMARY, UNKNOWN
from gpuwaste.warehouse.schema import JOB_ATTEMPTS
from gpuwaste.warehouse.store import Warehouse


def options_for(
    cfg: SlurmSource, cluster: ClusterConfig, limits: FileLimits | None = None
) -> SacctOptions:
    limits = limits or FileLimits()
    try:
        re.compile(cfg.debug_name_pattern)
    except re.error as exc:
        raise IngestError(
            f"cluster '{cluster.name}': slurm.debug_name_pattern is not a regular expression ({exc})."
        ) from None
    columns = cfg.columns or (columns_from_command(cfg.command) if cfg.command else None)
    return SacctOptions(
        max_gzip_ratio=limits.max_gzip_ratio,
        timezone=cluster.timezone,
        vc_from=cfg.vc_from,
        debug_partitions=tuple(cfg.debug_partitions),
        debug_qos=tuple(cfg.debug_qos),
        debug_name_pattern=cfg.debug_name_pattern,
        delimiter=cfg.delimiter,
        columns=tuple(columns) if columns else None,
    )


def read_text(path: Path, what: str, limits: FileLimits, escape_lines: bool = False) -> str:
    """A whole input file as text (within `[files] max_read_whole_mib`; a `.gz` decompressed),
    or IngestError naming it. With `escape_lines`, bytes that are not UTF-8 after the first line are kept as lone
    surrogates (`surrogateescape`), for the parser to refuse their lines alone; in the first line
    they refuse the file."""
    data = read_whole(path, what, limits)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if escape_lines and exc.start > data.find(b"\n") >= 0:
            return data.decode("utf-8", "surrogateescape")
        raise IngestError(
            f"{path} is not a text file (not UTF-8); expected {what} output."
        ) from None


def run_sacct(command: list[str], start: datetime, end: datetime, timeout: float) -> str:
    """Run the configured sacct command over [start, end); its stdout, times printed in UTC.

    `TZ=UTC` makes sacct print (and read `-S`/`-E`) in UTC, so the hour repeated when clocks go
    back cannot be ambiguous; `SLURM_TIME_FORMAT=standard` keeps ISO `YYYY-MM-DDTHH:MM:SS`.
    """
    fmt = "%Y-%m-%dT%H:%M:%S"
    argv = [
        *command,
        "-S",
        start.astimezone(UTC).strftime(fmt),
        "-E",
        end.astimezone(UTC).strftime(fmt),
    ]
    env = {**os.environ, "TZ": "UTC", "SLURM_TIME_FORMAT": "standard"}
    return run_command(argv, "sacct", timeout, env)


def write_slurm(
    wh: Warehouse,
    cluster: str,
    parsed: SacctParse,
    batch: str,
    gres_idx: GresIdx = "minor",
) -> tuple[dict[str, int], Ties | None]:
    """Upsert jobs, replace their job_gpus rows, replace the batch's quarantine rows (with the
    IDX that name no GPU of their host)."""
    jobs = parsed.jobs
    written: dict[str, int] = {}
    summaries = tie_summaries(wh, cluster, parsed.gpu_summaries, gres_idx)
    extra = [
        summaries.drop_nulls("gpu")
        .select("job_id", "host", "gpu")
        .with_columns(pl.lit(JOBSTATS_SUMMARY).alias("gpu_from"))
    ]
    attempts, kept = earlier_runs(wh, cluster, jobs, parsed.attempts)
    if kept.height:  # the job was submitted when its first run, read before, was
        first = kept.group_by("job_id").agg(pl.col("submit_ts").min().alias("first"))
        jobs = (
            jobs.join(first, on="job_id", how="left")
            .with_columns(pl.min_horizontal("submit_ts", "first").alias("submit_ts"))
            .drop("first")
        )
    ties = tie_runs(wh, cluster, jobs, attempts, gres_idx, extra) if jobs.height else None
    shown = jobs.with_columns(pl.col("slurm_job_id").alias("shown_id"))  # what log names carry
    written["jobs"] = wh.upsert("jobs", cluster, SOURCE, shown) if jobs.height else 0
    if ties is not None:
        ids = jobs["job_id"].implode()
        run_key = pl.concat_str(
            pl.col("job_id"), pl.col("attempt").cast(pl.String()), separator="|"
        )
        stays = kept.select(run_key)["job_id"].implode()  # the stored runs kept, and their rows
        written["job_gpus"] = wh.replace_rows_where(
            "job_gpus",
            cluster,
            JOB_GPUS_KEY,
            pl.col("job_id").is_in(ids) & ~run_key.is_in(stays),
            ties.rows,
        )
        stored_runs = wh.cluster_file("job_attempts", cluster, SOURCE)
        if attempts.height or stored_runs.exists():  # a job requeued since: its runs
            written["job_attempts"] = wh.replace_rows_where(
                "job_attempts",
                cluster,
                SOURCE,
                pl.col("job_id").is_in(ids),
                pl.concat([kept, attempts.drop("hosts", "gpus")]),
            )
        stored = wh.cluster_file("job_gpu_summaries", cluster, JOB_GPUS_KEY)
        if summaries.height or stored.exists():
            written["job_gpu_summaries"] = wh.replace_rows_where(
                "job_gpu_summaries", cluster, JOB_GPUS_KEY, pl.col("job_id").is_in(ids), summaries
            )
        yield_label_jobs(wh, cluster)
    refused = parsed.refused + (ties.minors.refused if ties is not None else [])
    written["quarantine"] = write_quarantine(wh, cluster, SOURCE, batch, refused)
    return written, ties


def earlier_runs(
    wh: Warehouse, cluster: str, jobs: pl.DataFrame, attempts: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(the runs read now, numbered after the stored runs of their jobs that started before any
    of them; those stored runs). A configured command reads a window at a time, and `sacct -D`
    prints only the runs of its window: a requeued job's earlier runs, read before, stay its
    first attempts (their job_gpus rows kept), and a job whose one run is read now, after stored
    runs, gets that run as its next attempt. Reading the same runs again replaces them."""
    empty = pl.DataFrame(schema=JOB_ATTEMPTS.stored_columns)
    path = wh.cluster_file("job_attempts", cluster, SOURCE)
    if not path.exists() or jobs.height == 0:
        return attempts, empty
    stored = wh.read("job_attempts", cluster, SOURCE).join(jobs.select("job_id"), on="job_id")
    starts = pl.concat([attempts.select("job_id", "start_ts"), jobs.select("job_id", "start_ts")])
    first = starts.group_by("job_id").agg(pl.col("start_ts").min().alias("first"))
    kept = (
        stored.join(first, on="job_id")
        .filter(pl.col("start_ts") < pl.col("first"))
        .select(empty.columns)
        .cast(empty.schema)
    )
    if kept.height == 0:
        return attempts, empty
    offset = kept.group_by("job_id").agg(pl.len().cast(pl.Int16()).alias("offset"))
    single = (
        jobs.join(attempts.select("job_id").unique(), on="job_id", how="anti")
        .join(offset, on="job_id", how="semi")
        .filter(pl.col("start_ts").is_not_null())
        .with_columns(pl.lit(0, dtype=pl.Int16()).alias("attempt"))
        .select(attempts.columns)
    )
    shifted = (
        pl.concat([attempts, single.cast(attempts.schema)])
        .join(offset, on="job_id", how="left")
        .with_columns((pl.col("attempt") + pl.col("offset").fill_null(0)).cast(pl.Int16()))
        .drop("offset")
    )
    return shifted, kept


def tie_runs(
    wh: Warehouse,
    cluster: str,
    jobs: pl.DataFrame,
    attempts: pl.DataFrame,
    gres_idx: GresIdx,
    extra: list[pl.DataFrame],
) -> Ties:
    """The job_gpus rows of the jobs, each run of a requeued job (`attempts`) under its attempt
    number. The evidence is per job id, so each attempt number is tied on its own, with each
    run's interval; an earlier run keeps only devices on its own hosts (a capture or a summary
    names the job, not the run), and the Jobstats summary, written at the job's end, counts for
    its last run alone. A job run once is attempt 0, as before."""
    if attempts.height == 0:
        return tie_jobs(wh, cluster, jobs, gres_idx=gres_idx, extra=extra)
    last = attempts.group_by("job_id").agg(pl.col("attempt").max().alias("last"))
    finals = jobs.join(last, on="job_id", how="left").with_columns(
        pl.col("last").fill_null(0).cast(pl.Int16()).alias("attempt")
    )
    earlier = (
        attempts.join(last, on="job_id")
        .filter(pl.col("attempt") < pl.col("last"))
        .join(jobs.select("job_id", "slurm_job_id", "mig_profile", "gpu_model"), on="job_id")
        .select(
            *("job_id", "slurm_job_id", "attempt", "start_ts", "end_ts", "gpus", "hosts"),
            *("mig_profile", "gpu_model"),
        )
    )
    ties = tie_jobs(wh, cluster, finals.drop("last"), gres_idx=gres_idx, extra=extra)
    rows = [ties.rows]
    for _number, runs in earlier.group_by("attempt"):
        hosts = runs.select("job_id", pl.col("hosts").alias("host")).explode("host")
        rows.append(
            tie_jobs(wh, cluster, runs, gres_idx=gres_idx).rows.join(hosts, on=["job_id", "host"])
        )
    return Ties(rows=pl.concat(rows).sort("job_id", "attempt", "host", "gpu"), minors=ties.minors)


def _tie_note(ties: Ties | None) -> str:
    """How this run's jobs were tied to their GPUs, for the summary line."""
    if ties is None or ties.rows.height == 0:
        return ""
    by = ties.rows.group_by("gpu_from").agg(pl.len().alias("n"))
    counts = dict(by.iter_rows())
    parts = [f"{counts[k]} {k}" for k in GPU_FROM_VALUES if k in counts and k != UNKNOWN]
    note = f", job x GPU rows from {', '.join(parts)}" if parts else ""
    if counts.get(UNKNOWN):
        note += f", {counts[UNKNOWN]} job x host rows with GPU index unknown (gpu=-1)"
    waiting = ties.minors.no_minor
    if waiting.height:
        hosts = sorted(set(waiting["host"].to_list()))
        note += (
            f"; {waiting['job_id'].n_unique()} job(s) captured by scontrol stay unresolved: the "
            f"samples of {', '.join(hosts[:3])}{' ...' if len(hosts) > 3 else ''} carry no GPU "
            'minor number to join Slurm\'s IDX to (set [clusters.slurm] gres_idx = "index" '
            "where IDX is the NVML index)"
        )
    return note


def tie_summaries(
    wh: Warehouse, cluster: str, summaries: pl.DataFrame, gres_idx: GresIdx
) -> pl.DataFrame:
    """The Jobstats summaries' rows with `gpu`, the index each GPU is tied to (null: none), by
    the rule of `summary_ties` over the GPUs the hosts' samples show."""
    hosts = summaries["host"].unique().sort().to_list()
    host_gpus = host_gpus_from_samples(wh, cluster, hosts)
    return summaries.with_columns(
        summary_gpus(summaries, host_gpus, gres_idx).alias("gpu"),
        pl.lit(JOBSTATS_SUMMARY).alias("source"),
    )


def ingest_slurm(
    settings: Settings,
    cluster: ClusterConfig,
    *,
    now: datetime | None = None,
) -> IngestResult:
    """Run the Slurm source of one cluster (file or command) and write the results."""
    cfg = cluster.slurm
    if cfg is None:
        raise IngestError(f"cluster '{cluster.name}' has no [slurm] source configured.")
    if cfg.file is None and not cfg.command:
        raise IngestError(
            f"cluster '{cluster.name}': the slurm source needs a `file` or a `command`."
        )
    opts = replace(
        options_for(cfg, cluster, settings.files),
        times=TimeBounds.at(now or datetime.now(UTC), settings.ingest),
    )
    wh = Warehouse(settings.data_dir)
    moment = (now or datetime.now(UTC)).replace(microsecond=0)
    window_end: datetime | None = None
    if cfg.file is not None:
        text = read_text(cfg.file, "sacct", settings.files, escape_lines=True)
        batch = str(cfg.file)
        location = str(cfg.file)
    else:
        assert cfg.command is not None
        window_end = moment
        start = get_watermark(wh, cluster.name, SOURCE) or (
            window_end - timedelta(days=cfg.first_window_days)
        )
        text = run_sacct(cfg.command, start, window_end, cfg.command_timeout_s)
        opts = replace(opts, timezone="UTC")
        batch = f"sacct {start.isoformat()}..{window_end.isoformat()}"
        location = "sacct"
    try:
        parsed = parse_sacct(text, opts, location)
    except SacctFormatError as exc:
        where = cfg.file if cfg.file is not None else f"the output of {cfg.command[0]!r}"  # type: ignore[index]
        raise IngestError(f"{where}: {exc}.") from None
    sc = read_scontrol(wh, cluster.name, cfg, settings.files, moment)
    parsed = replace(parsed, refused=parsed.refused + sc.refused)
    written, ties = write_slurm(wh, cluster.name, parsed, batch, cfg.gres_idx)
    prune_minors(wh, cluster.name, older_than=moment - timedelta(days=cfg.scontrol_keep_days))
    prune_captures(wh, cluster.name, cfg.scontrol_keep_days, moment)
    mark = window_end or latest_job_time(parsed.jobs)
    if mark is not None:
        old = get_watermark(wh, cluster.name, SOURCE)
        if old is None or mark > old:
            set_watermark(wh, cluster.name, SOURCE, mark, {"batch": batch})
    note = f"{parsed.jobs.height} jobs"
    if parsed.pending:
        note += f", {parsed.pending} pending skipped"
    if parsed.gpu_summaries.height:
        note += f", {parsed.gpu_summaries.height} GPUs with a Jobstats summary"
    if sc.files:
        note += f", {sc.records} scontrol records from {len(sc.files)} file(s)"
    note += _tie_note(ties)
    return IngestResult(
        source=SOURCE,
        cluster=cluster.name,
        accepted=parsed.accepted,
        refused=parsed.refused + (ties.minors.refused if ties is not None else []),
        written=written,
        note=note,
    )


def run_slurm(settings: Settings, cluster: ClusterConfig, options: RunOptions) -> IngestResult:
    """The configured file or command of `cluster` (its runner in `ingest.sources`)."""
    return ingest_slurm(settings, cluster)
