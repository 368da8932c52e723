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

`job_gpus` (attempt 0, [start_ts, end_ts]; end null while running): the GPU indices of each job
come from, in order of preference,
1. `scontrol show job -d` output when supplied (`scontrol_file`, `--scontrol`);
2. the DCGM `hpc_job` label of `gpu_samples` already in the warehouse: every (host, gpu) whose
   samples carry the job's id (or, for an array task, its raw id) inside the job's interval;
3. otherwise one row per host of the job's NodeList with **gpu = -1, meaning "index unknown"**:
   the allocation is known per host but not per GPU, so such rows join to no GPU's samples.
A job's rows are replaced whole on every run, and a telemetry ingest that comes later fills
rows with gpu = -1 from the new samples' `hpc_job` labels (`fill_unknown_gpus`), so the indices
are the same whichever source arrived first. A job that holds no GPU (`gpus` = 0) has no rows.
Writing Slurm jobs removes the jobs derived from telemetry labels for the cluster
(`job_precedence`).
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl

from gpuwaste.config import ClusterConfig, FileLimits, Settings, SlurmSource
from gpuwaste.ingest.base import IngestError, IngestResult, RunOptions
from gpuwaste.ingest.files import check_read_whole
from gpuwaste.ingest.gpu_indices import (
    JOB_GPUS_KEY,
    PAIRS_SCHEMA,
    UNKNOWN_GPU,
    build_job_gpus,
    pairs_from_samples,
)
from gpuwaste.ingest.job_precedence import yield_label_jobs
from gpuwaste.ingest.slurm.parse import (
    SOURCE,
    SacctFormatError,
    SacctOptions,
    SacctParse,
    columns_from_command,
    parse_sacct,
)
from gpuwaste.ingest.slurm.scontrol_parse import ScontrolFormatError, parse_scontrol
from gpuwaste.ingest.times import TimeBounds
from gpuwaste.warehouse.bookkeeping import get_watermark, set_watermark, write_quarantine
from gpuwaste.warehouse.store import Warehouse


def options_for(cfg: SlurmSource, cluster: ClusterConfig) -> SacctOptions:
    try:
        re.compile(cfg.debug_name_pattern)
    except re.error as exc:
        raise IngestError(
            f"cluster '{cluster.name}': slurm.debug_name_pattern is not a regular expression ({exc})."
        ) from None
    columns = cfg.columns or (columns_from_command(cfg.command) if cfg.command else None)
    return SacctOptions(
        timezone=cluster.timezone,
        vc_from=cfg.vc_from,
        debug_partitions=tuple(cfg.debug_partitions),
        debug_qos=tuple(cfg.debug_qos),
        debug_name_pattern=cfg.debug_name_pattern,
        delimiter=cfg.delimiter,
        columns=tuple(columns) if columns else None,
    )


def read_text(path: Path, what: str, limits: FileLimits, escape_lines: bool = False) -> str:
    """A whole input file as text (within `[files] max_read_whole_mib`), or IngestError naming
    it. With `escape_lines`, bytes that are not UTF-8 after the first line are kept as lone
    surrogates (`surrogateescape`), for the parser to refuse their lines alone; in the first line
    they refuse the file."""
    check_read_whole(path, what, limits)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise IngestError(f"{what} file {path} does not exist.") from None
    except OSError as exc:
        raise IngestError(f"could not read {what} file {path}: {exc.strerror or exc}.") from None
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
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="surrogateescape",  # a line that is not UTF-8 is refused alone (parse)
            timeout=timeout,
            env=env,
            check=False,
        )
    except FileNotFoundError:
        raise IngestError(f"the sacct command {command[0]!r} was not found on PATH.") from None
    except subprocess.TimeoutExpired:
        raise IngestError(
            f"the sacct command {command[0]!r} did not finish in {timeout:g} s."
        ) from None
    if proc.returncode != 0:
        detail = (proc.stderr or "").strip().splitlines()
        why = detail[-1][:300] if detail else f"exit status {proc.returncode}"
        raise IngestError(f"the sacct command {command[0]!r} failed: {why}")
    return proc.stdout


def write_slurm(
    wh: Warehouse,
    cluster: str,
    parsed: SacctParse,
    batch: str,
    scontrol_pairs: pl.DataFrame,
) -> dict[str, int]:
    """Upsert jobs, replace their job_gpus rows, replace the batch's quarantine rows."""
    jobs = parsed.jobs
    written: dict[str, int] = {}
    sample_pairs = pairs_from_samples(wh, cluster, jobs)
    job_gpus = build_job_gpus(jobs, scontrol_pairs, sample_pairs)
    shown = jobs.with_columns(pl.col("slurm_job_id").alias("shown_id"))  # what log names carry
    written["jobs"] = wh.upsert("jobs", cluster, SOURCE, shown) if jobs.height else 0
    if jobs.height:
        ids = jobs["job_id"].implode()
        written["job_gpus"] = wh.replace_rows_where(
            "job_gpus", cluster, JOB_GPUS_KEY, pl.col("job_id").is_in(ids), job_gpus
        )
        yield_label_jobs(wh, cluster)
    written["quarantine"] = write_quarantine(wh, cluster, SOURCE, batch, parsed.refused)
    return written


def _latest(jobs: pl.DataFrame) -> datetime | None:
    if jobs.height == 0:
        return None
    stamps = jobs.select(
        pl.max_horizontal(pl.col("submit_ts"), pl.col("start_ts"), pl.col("end_ts")).max()
    ).item()
    return stamps if isinstance(stamps, datetime) else None


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
        options_for(cfg, cluster),
        times=TimeBounds.at(now or datetime.now(UTC), settings.ingest),
    )
    wh = Warehouse(settings.data_dir)
    scontrol_pairs = pl.DataFrame(schema={**PAIRS_SCHEMA, "job_id_raw": pl.String()})
    refused_sc = []
    if cfg.scontrol_file is not None:
        sc_text = read_text(cfg.scontrol_file, "scontrol show job -d", settings.files)
        try:
            sc = parse_scontrol(sc_text, str(cfg.scontrol_file))
        except ScontrolFormatError as exc:
            raise IngestError(f"{cfg.scontrol_file}: {exc}.") from None
        scontrol_pairs = sc.gpus
        refused_sc = sc.refused
    window_end: datetime | None = None
    if cfg.file is not None:
        text = read_text(cfg.file, "sacct", settings.files, escape_lines=True)
        batch = str(cfg.file)
        location = str(cfg.file)
    else:
        assert cfg.command is not None
        window_end = (now or datetime.now(UTC)).replace(microsecond=0)
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
    parsed = replace(parsed, refused=parsed.refused + refused_sc)
    written = write_slurm(wh, cluster.name, parsed, batch, scontrol_pairs)
    mark = window_end or _latest(parsed.jobs)
    if mark is not None:
        old = get_watermark(wh, cluster.name, SOURCE)
        if old is None or mark > old:
            set_watermark(wh, cluster.name, SOURCE, mark, {"batch": batch})
    unknown = 0
    if written.get("job_gpus"):
        unknown = (
            wh.read("job_gpus", cluster.name, JOB_GPUS_KEY)
            .filter(pl.col("job_id").is_in(parsed.jobs["job_id"].implode()))
            .filter(pl.col("gpu") == UNKNOWN_GPU)
            .height
        )
    note = f"{parsed.jobs.height} jobs"
    if parsed.pending:
        note += f", {parsed.pending} pending skipped"
    if unknown:
        note += f", {unknown} job x host rows with GPU index unknown (gpu=-1)"
    return IngestResult(
        source=SOURCE,
        cluster=cluster.name,
        accepted=parsed.accepted,
        refused=parsed.refused,
        written=written,
        note=note,
    )


def run_slurm(settings: Settings, cluster: ClusterConfig, options: RunOptions) -> IngestResult:
    """The configured file or command of `cluster` (its runner in `ingest.sources`)."""
    return ingest_slurm(settings, cluster)
