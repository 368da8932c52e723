"""The warehouse contract: every table's columns and types, declared once.

Fact tables are written by the ingestors, result tables by `gpuwaste analyze`. All timestamps are
UTC (`timestamp[us, UTC]`). Partition columns (`cluster`, `date`) are not stored inside the parquet
files: they come from the hive path `<table>/cluster=<c>/date=<yyyy-mm-dd>/`.

Layouts:
- `dated`:   `<table>/cluster=<c>/date=<d>/data.parquet`, one file per (cluster, UTC day) and
             block of hosts (`data.parquet` the first; a day first written with more than
             `host_blocks.BLOCK_HOSTS` hosts has more, `hosts-from-<host>.parquet`), replaced
             for a time window (sample tables).
- `cluster`: `<table>/cluster=<c>/<key>.parquet`, one file per (cluster, key) where key names
             the writer (a source or an analysis), replaced whole or upserted by primary key.
"""

from __future__ import annotations

import polars as pl

from gpuwaste.warehouse.results import RESULT_TABLES
from gpuwaste.warehouse.table import DEVICE_COLUMNS, DEVICE_KEY, UTC_TS, Table

GPU_SAMPLES = Table(
    "gpu_samples",
    {
        "cluster": pl.String(),
        "host": pl.String(),
        "gpu": pl.Int16(),
        "gpu_instance": pl.Int16(),  # MIG GPU instance (DCGM GPU_I_ID); null for a whole GPU
        "mig_profile": pl.String(),  # e.g. "1g.10gb" (DCGM GPU_I_PROFILE); null for a whole GPU
        "gpu_model": pl.String(),  # DCGM modelName, e.g. "NVIDIA A100-SXM4-80GB"
        "ts": UTC_TS,
        "util": pl.Float64(),
        "mem_used_mib": pl.Float64(),
        "mem_total_mib": pl.Float64(),
        "job_id": pl.String(),
        "sm_active": pl.Float64(),
        "tensor_active": pl.Float64(),
        "power_w": pl.Float64(),
        # the coarse busy metric ("a kernel ran in the period": DCGM_FI_DEV_GPU_UTIL, nvidia-smi's
        # utilization.gpu), the dialect's utilization of column `gpu_util`, kept beside `util`
        # (the best metric present) to tell a busy loop from work (#44 looks_busy); null where the
        # source has none. Files written before it read it as null.
        "gpu_util": pl.Float64(),
        # the exporter's energy counter in J where its dialect has one (DCGM's since boot, in
        # mJ, resets on reboot); null elsewhere and in files written before it
        "energy_j": pl.Float64(),
        "util_source": pl.String(),
        "uuid": pl.String(),
        "source": pl.String(),
        # the device minor number (/dev/nvidiaN, Slurm's gres IDX) where the telemetry dialect
        # gives it (DCGM `device`, Jobstats `minor_number`); never the NVML index. Files written
        # before it read it as null.
        "gpu_minor": pl.Int16(),
    },
    layout="dated",
    key=("host", "gpu", "gpu_instance", "ts", "job_id"),
    sort=("host", "gpu", "ts"),
    doc="One row per device (a GPU, or a MIG instance of one) per sample. util 0-100 from the "
    "best metric present (util_source).",
    partition_cols=("cluster", "date"),
)

HOST_SAMPLES = Table(
    "host_samples",
    {
        "cluster": pl.String(),
        "host": pl.String(),
        "ts": UTC_TS,
        "cpu_util": pl.Float64(),
        "mem_used_frac": pl.Float64(),
        "source": pl.String(),
    },
    layout="dated",
    key=("host", "ts"),
    sort=("host", "ts"),
    doc="One row per host per sample: CPU utilization 0-100 and host memory used (0-1).",
    partition_cols=("cluster", "date"),
)

JOBS = Table(
    "jobs",
    {
        "cluster": pl.String(),
        "job_id": pl.String(),
        "user": pl.String(),
        "vc": pl.String(),
        "name": pl.String(),
        "state": pl.String(),  # passed | killed | unsuccessful | running
        "raw_state": pl.String(),
        "submit_ts": UTC_TS,
        "start_ts": UTC_TS,
        "end_ts": UTC_TS,
        "gpus": pl.Int32(),
        "is_debug": pl.Boolean(),
        "source": pl.String(),
        # the job id as the scheduler shows it where it differs (a Slurm array task `123_4`,
        # whose job_id is its JobIDRaw): what log file names carry
        "shown_id": pl.String(),
        "exit_code": pl.Int32(),  # Slurm ExitCode `code:signal`; null where the source has none
        "exit_signal": pl.Int32(),
    },
    layout="cluster",
    key=("job_id",),
    sort=("job_id",),
    doc="One row per job, upserted by job_id: a job seen again with a new state is updated.",
)

JOB_GPUS = Table(
    "job_gpus",
    {
        "cluster": pl.String(),
        **DEVICE_COLUMNS,
        "gpu_model": pl.String(),  # from the scheduler (Slurm GRES type), when it names one
        "start_ts": UTC_TS,
        "end_ts": UTC_TS,
        "gpu_from": pl.String(),  # which evidence named the GPU (warehouse/gpu_from.py)
    },
    layout="cluster",
    key=DEVICE_KEY,
    sort=DEVICE_KEY,
    doc="One row per job x attempt x device (a GPU or a MIG instance): the allocation "
    "intervals that join jobs to samples.",
)

JOB_GPU_SUMMARIES = Table(
    "job_gpu_summaries",
    {
        "cluster": pl.String(),
        "job_id": pl.String(),
        "host": pl.String(),
        "gpu_minor": pl.Int16(),  # the device minor number (/dev/nvidiaN) the summary names
        "gpu": pl.Int16(),  # the job_gpus device it is tied to (see doc)
        "util_pct": pl.Float64(),  # mean utilization over the job, 0-100
        "mem_used_mib": pl.Float64(),  # the most memory used over the job
        "mem_total_mib": pl.Float64(),
        "source": pl.String(),  # "jobstats-summary"
    },
    layout="cluster",
    key=("job_id", "host", "gpu_minor"),
    sort=("job_id", "host", "gpu_minor"),
    doc="One row per job x host x GPU of a scheduler's end-of-job summary (Princeton Jobstats' "
    "AdminComment, read by the Slurm source): the GPU's mean utilization and largest memory used "
    "over the job. gpu is the NVML index where telemetry maps the minor number to one (the "
    "samples' gpu_minor), else the minor number itself. Replaced per job on every Slurm ingest.",
)

JOB_GPU_MINORS = Table(
    "job_gpu_minors",
    {
        "cluster": pl.String(),
        "job_id": pl.String(),  # Slurm's JobId (JobIDRaw)
        "slurm_job_id": pl.String(),  # as displayed: `123_4` (array task), `123+1` (het)
        "host": pl.String(),
        "minor": pl.Int16(),  # the device number Slurm names (scontrol `IDX`)
        "gpu_from": pl.String(),  # the evidence (warehouse/gpu_from.py): scontrol, ...
        "capture": pl.String(),  # the file it was read from (a stored capture's name)
        "seen_ts": UTC_TS,  # when it was read
    },
    layout="cluster",
    key=("job_id", "host", "minor", "gpu_from"),
    sort=("job_id", "host", "minor"),
    doc="The GPU device numbers a scheduler record names per job x host (Slurm IDX: the "
    "device minor number), kept until samples say which GPU each one is; removed once the "
    "job's GPUs are resolved or after [clusters.slurm] scontrol_keep_days.",
)

INGEST_STATE = Table(
    "ingest_state",
    {
        "cluster": pl.String(),
        "source": pl.String(),
        "watermark": UTC_TS,
        "updated_at": UTC_TS,
        "detail": pl.String(),
    },
    layout="cluster",
    key=("source",),
    sort=("source",),
    doc="One row per (cluster, source): how far ingestion has reached.",
)

QUARANTINE = Table(
    "quarantine",
    {
        "cluster": pl.String(),
        "source": pl.String(),
        "batch": pl.String(),
        "location": pl.String(),
        "reason": pl.String(),
        "raw": pl.String(),
        "ingested_at": UTC_TS,
    },
    layout="cluster",
    key=("source", "batch", "location", "reason"),
    sort=("source", "batch", "location"),
    doc="Every refused input record with where it was and why; replaced per (source, batch).",
)

JOB_LOGS = Table(
    "job_logs",
    {
        "cluster": pl.String(),
        "path": pl.String(),  # relative to the logs folder
        "job_key": pl.String(),  # the job id as the file name gives it (`123`, `123_4`)
        "attempt": pl.Int16(),  # null: the name gives none (`slurm-123.out`: the last run's)
        "size": pl.Int64(),  # the file as last read: size and mtime, to skip it when unchanged
        "mtime_ns": pl.Int64(),
        "rules": pl.String(),  # digest of the rules it was matched with
        "reason": pl.String(),  # null: no rule matched
        "sources": pl.String(),  # IF, AE, U joined by ','
        "implicit": pl.Boolean(),
        "rank": pl.Int32(),  # the rule's place in the rule order: the lower, the more specific
        "line_no": pl.Int64(),  # of the matched line, counted in the part read (the tail)
        "line": pl.String(),  # the matched line (at most 500 characters), never the whole log
        "read_at": UTC_TS,
    },
    layout="cluster",
    key=("path",),
    sort=("path",),
    doc="One row per job log file (stdout/stderr) read: the failure signature it matched, if "
    "any, and the matched line; never the log itself.",
)

JOB_ATTEMPTS = Table(
    "job_attempts",
    {
        "cluster": pl.String(),
        "job_id": pl.String(),
        "attempt": pl.Int16(),  # 0 for the first run; the job_gpus rows of the run carry it
        "submit_ts": UTC_TS,  # when this run was queued (Slurm resets Submit at a requeue)
        "start_ts": UTC_TS,
        "end_ts": UTC_TS,
        "state": pl.String(),  # passed | killed | unsuccessful | running, as jobs.state
        "raw_state": pl.String(),  # the scheduler's (REQUEUED, NODE_FAIL, PREEMPTED, ...)
        "exit_code": pl.Int32(),
        "exit_signal": pl.Int32(),
    },
    layout="cluster",
    key=("job_id", "attempt"),
    sort=("job_id", "attempt"),
    doc="One row per run of a job the scheduler ran more than once (Slurm: a requeued job's "
    "records under one JobID in `sacct --duplicates`), with each run's own state; a job run "
    "once has none (its state is in jobs).",
)

FACT_TABLES: dict[str, Table] = {
    t.name: t
    for t in (
        GPU_SAMPLES,
        HOST_SAMPLES,
        JOBS,
        JOB_GPUS,
        JOB_GPU_SUMMARIES,
        JOB_GPU_MINORS,
        INGEST_STATE,
        QUARANTINE,
        JOB_LOGS,
        JOB_ATTEMPTS,
    )
}

NOTIFICATIONS = Table(
    "notifications",
    {
        "cluster": pl.String(),
        "recipient": pl.String(),  # an email address; for a webhook, "user:NAME" / "vc:NAME"
        "channel": pl.String(),  # "email", or "webhook:<fingerprint of the URL>"
        "window_start": UTC_TS,
        "window_end": UTC_TS,
        "content_hash": pl.String(),
        "kind": pl.String(),  # user | vc
        "about": pl.String(),  # the user's or the VC's name
        "job_ids": pl.String(),  # comma-separated
        "status": pl.String(),  # sending | unconfirmed | sent | failed
        "message_id": pl.String(),
        "attempts": pl.Int64(),
        "detail": pl.String(),  # why it failed (one sentence, no secret)
        "updated_at": UTC_TS,
    },
    layout="cluster",
    key=("recipient", "channel", "window_start", "window_end", "content_hash"),
    sort=("window_start", "recipient", "channel", "content_hash"),
    doc="The notify ledger: one row per message (recipient x channel x window x content), "
    "written before and after each delivery so that nothing is sent twice (docs/act.md).",
)

# Tables of the commands that act on the results (`gpuwaste notify`): state, not facts.
STATE_TABLES: dict[str, Table] = {t.name: t for t in (NOTIFICATIONS,)}


def all_tables() -> dict[str, Table]:
    """Fact tables and result tables (`gpuwaste.warehouse.results`), declared statically: every
    process sees the same set, whatever else it imported."""
    return {**FACT_TABLES, **STATE_TABLES, **RESULT_TABLES}


def table(name: str) -> Table:
    tables = all_tables()
    if name not in tables:
        raise KeyError(f"unknown table '{name}' (known: {', '.join(sorted(tables))})")
    return tables[name]


def conform(df: pl.DataFrame, t: Table, *, stored: bool = False) -> pl.DataFrame:
    """Select and cast `df` to the table's columns; missing optional columns become nulls."""
    cols = t.stored_columns if stored else t.columns
    exprs = []
    for name, dtype in cols.items():
        if name in df.columns:
            exprs.append(pl.col(name).cast(dtype).alias(name))
        else:
            exprs.append(pl.lit(None, dtype=dtype).alias(name))
    return df.select(exprs)


def empty(t: Table) -> pl.DataFrame:
    return pl.DataFrame(schema=t.schema)
