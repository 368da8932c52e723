"""The Slurm source: sacct output (a file, or a configured `sacct` command) -> `jobs`, `job_gpus`.

I/O and writes only; parsing is in `slurm_parse` and `scontrol_parse`.

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

import duckdb
import polars as pl

from gpuwaste.config import ClusterConfig, Settings, SlurmSource
from gpuwaste.ingest.base import IngestError, IngestResult
from gpuwaste.ingest.job_precedence import yield_label_jobs
from gpuwaste.ingest.scontrol_parse import ScontrolFormatError, parse_scontrol
from gpuwaste.ingest.slurm_parse import (
    SOURCE,
    SacctFormatError,
    SacctOptions,
    SacctParse,
    columns_from_command,
    parse_sacct,
)
from gpuwaste.warehouse.bookkeeping import get_watermark, set_watermark, write_quarantine
from gpuwaste.warehouse.store import Warehouse

UNKNOWN_GPU = -1  # job_gpus.gpu when only the host is known
JOB_GPUS_KEY = SOURCE

_PAIRS_SCHEMA: dict[str, pl.DataType] = {
    "job_id": pl.String(),
    "host": pl.String(),
    "gpu": pl.Int16(),
}


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


def read_text(path: Path, what: str) -> str:
    """A whole input file as text, or IngestError naming it."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise IngestError(f"{what} file {path} does not exist.") from None
    except OSError as exc:
        raise IngestError(f"could not read {what} file {path}: {exc.strerror or exc}.") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
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
            argv, capture_output=True, text=True, timeout=timeout, env=env, check=False
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


def pairs_from_samples(
    wh: Warehouse,
    cluster: str,
    jobs: pl.DataFrame,
    within: tuple[datetime, datetime] | None = None,
) -> pl.DataFrame:
    """(job_id, host, gpu) where gpu_samples carry the job's id (hpc_job) inside its interval
    (and, if given, inside `within` = [start, end): only those samples are read)."""
    base = wh.cluster_dir("gpu_samples", cluster)
    started = jobs.filter(pl.col("start_ts").is_not_null())
    if started.height == 0 or not any(base.glob("date=*/*.parquet")):
        return pl.DataFrame(schema=_PAIRS_SCHEMA)
    keys = pl.concat(
        [
            started.select("job_id", pl.col("job_id").alias("key"), "start_ts", "end_ts"),
            started.filter(pl.col("slurm_job_id").is_not_null())
            .filter(pl.col("slurm_job_id") != pl.col("job_id"))
            .select("job_id", pl.col("slurm_job_id").alias("key"), "start_ts", "end_ts"),
        ]
    )
    lo = keys["start_ts"].min()
    if within is not None and isinstance(lo, datetime):
        lo = max(lo, within[0])
    bounds = within or (None, None)
    glob = str(base / "date=*" / "*.parquet").replace("'", "''")
    con = duckdb.connect(":memory:")
    try:
        con.execute("SET TimeZone = 'UTC'")
        con.register("job_keys", keys.to_arrow())
        df = con.sql(
            f"""
            select distinct k.job_id, s.host, cast(s.gpu as smallint) as gpu
            from read_parquet('{glob}', hive_partitioning = true, union_by_name = true) as s
            join job_keys as k on s.job_id = k.key
            where s.date >= cast($1 as date)
              and s.ts >= k.start_ts and (k.end_ts is null or s.ts <= k.end_ts)
              and ($3 is null or (s.date <= cast($3 as date) and s.ts >= $2 and s.ts < $3))
            """,
            params=[lo.date() if isinstance(lo, datetime) else None, *bounds],
        ).pl()
    finally:
        con.close()
    return df.cast(_PAIRS_SCHEMA) if df.height else pl.DataFrame(schema=_PAIRS_SCHEMA)


def build_job_gpus(
    jobs: pl.DataFrame, scontrol_pairs: pl.DataFrame, sample_pairs: pl.DataFrame
) -> pl.DataFrame:
    """job_gpus rows: indices from scontrol, else from samples, else one gpu=-1 row per host.
    A job that holds no GPU (`gpus` = 0: no GPU in its TRES / GRES) has no rows."""
    started = jobs.filter(pl.col("start_ts").is_not_null() & (pl.col("gpus").fill_null(1) > 0))
    spans = started.select("job_id", "start_ts", "end_ts")
    sc = scontrol_pairs
    if sc.height:
        # scontrol prints the raw JobId (our job_id) and the array / het form (slurm_job_id).
        by_display = started.select(pl.col("job_id").alias("jid"), pl.col("slurm_job_id"))
        sc = pl.concat(
            [
                sc.select(pl.col("job_id_raw").alias("job_id"), "host", "gpu"),
                sc.join(by_display, left_on="job_id", right_on="slurm_job_id", how="inner").select(
                    pl.col("jid").alias("job_id"), "host", "gpu"
                ),
            ]
        ).unique()
    from_sc = sc.join(spans.select("job_id"), on="job_id", how="semi")
    have = from_sc.select("job_id").unique()
    from_samples = sample_pairs.join(have, on="job_id", how="anti")
    have = pl.concat([have, from_samples.select("job_id").unique()])
    unknown = (
        started.join(have, on="job_id", how="anti")
        .select("job_id", pl.col("hosts").alias("host"))
        .explode("host")
        .drop_nulls("host")
        .with_columns(pl.lit(UNKNOWN_GPU, dtype=pl.Int16()).alias("gpu"))
    )
    pairs = pl.concat(
        [
            from_sc.select("job_id", "host", pl.col("gpu").cast(pl.Int16())),
            from_samples.select("job_id", "host", pl.col("gpu").cast(pl.Int16())),
            unknown.select("job_id", "host", "gpu"),
        ]
    ).unique()
    return (
        pairs.join(spans, on="job_id", how="inner")
        .with_columns(pl.lit(0, dtype=pl.Int16()).alias("attempt"))
        .select("job_id", "attempt", "host", "gpu", "start_ts", "end_ts")
        .sort("job_id", "host", "gpu")
    )


def fill_unknown_gpus(wh: Warehouse, cluster: str, start: datetime, end: datetime) -> int:
    """Give stored Slurm allocations with GPU index unknown (gpu = -1) the indices that the job
    labels of the samples just written in [start, end) show, as `ingest slurm` run after the
    telemetry would have. Called by telemetry ingests (reading only their own time range, so a
    cluster without job labels costs a scan of the new samples only); returns the jobs resolved.
    """
    stored = wh.read("job_gpus", cluster, JOB_GPUS_KEY)
    unknown = stored.filter(
        (pl.col("gpu") == UNKNOWN_GPU)
        & (pl.col("start_ts") < end)
        & (pl.col("end_ts").is_null() | (pl.col("end_ts") >= start))
    )
    if unknown.height == 0:
        return 0
    # the rows carry what build_job_gpus needs: the job's interval and its hosts
    jobs = unknown.group_by("job_id").agg(
        pl.col("start_ts").first(),
        pl.col("end_ts").first(),
        pl.col("host").alias("hosts"),
        pl.lit(None, dtype=pl.Int32()).alias("gpus"),
        pl.lit(None, dtype=pl.String()).alias("slurm_job_id"),
    )
    pairs = pairs_from_samples(wh, cluster, jobs, within=(start, end))
    if pairs.height == 0:
        return 0
    resolved = jobs.join(pairs.select("job_id").unique(), on="job_id", how="semi")
    rows = build_job_gpus(resolved, pairs.clear(), pairs)
    ids = resolved["job_id"].implode()
    wh.replace_rows_where("job_gpus", cluster, JOB_GPUS_KEY, pl.col("job_id").is_in(ids), rows)
    return resolved.height


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
    written["jobs"] = wh.upsert("jobs", cluster, SOURCE, jobs) if jobs.height else 0
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
    opts = options_for(cfg, cluster)
    wh = Warehouse(settings.data_dir)
    scontrol_pairs = pl.DataFrame(schema={**_PAIRS_SCHEMA, "job_id_raw": pl.String()})
    refused_sc = []
    if cfg.scontrol_file is not None:
        sc_text = read_text(cfg.scontrol_file, "scontrol show job -d")
        try:
            sc = parse_scontrol(sc_text, str(cfg.scontrol_file))
        except ScontrolFormatError as exc:
            raise IngestError(f"{cfg.scontrol_file}: {exc}.") from None
        scontrol_pairs = sc.gpus
        refused_sc = sc.refused
    window_end: datetime | None = None
    if cfg.file is not None:
        text = read_text(cfg.file, "sacct")
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
