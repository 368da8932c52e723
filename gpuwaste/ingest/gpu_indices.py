"""Which GPUs a scheduler allocation held, when the scheduler names hosts but not GPU indices.

Shared by the sources: Slurm (and tabular exports with host-only allocations) write `job_gpus`
rows; the telemetry sources (Prometheus, OpenMetrics files) fill in the indices later. For each
job, the first of these that names any of its GPUs gives all of its rows, each row recording
which one in `gpu_from` (`warehouse/gpu_from.py`):
1. `whole-host`: its GPU count equals the whole GPUs its hosts' samples show (`gpu_evidence`);
2. `scontrol`: Slurm's per-node `IDX` (scontrol `-d` output: a file, a folder of captures, the
   captures of scheduled ingests; kept in `job_gpu_minors`), joined to the GPU by its minor
   number (`gpu_evidence.resolve_minors`);
3. `jobstats-summary`: Jobstats' job summary (per-GPU minor numbers), when a source gives it;
4. the rows stored for the job by an earlier run from evidence that does not last (a capture
   pruned since, a summary), so that a re-run never loses them;
5. `telemetry-label`: the DCGM `hpc_job` label of `gpu_samples` in the warehouse: every device
   (host, gpu, MIG instance) whose samples carry the job's id (or, for an array task, its raw
   id) inside the job's interval, with the instance's profile and the model;
6. otherwise one row per host with **gpu = -1 (`UNKNOWN_GPU`), meaning "index unknown"**
   (`unknown`).
`fill_unknown_gpus` resolves rows of the last kind when telemetry arrives after the jobs, so the
indices are the same whichever source arrived first.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import duckdb
import polars as pl

from gpuwaste.ingest.gpu_evidence import (
    HOST_GPUS_SCHEMA,
    MINORS_SCHEMA,
    GresIdx,
    MinorResolution,
    resolve_minors,
    whole_host_pairs,
)
from gpuwaste.ingest.job_local_gpus import is_job_local
from gpuwaste.warehouse import gpu_from
from gpuwaste.warehouse.bookkeeping import write_quarantine
from gpuwaste.warehouse.catalog import stored_columns
from gpuwaste.warehouse.schema import GPU_SAMPLES
from gpuwaste.warehouse.store import Warehouse

UNKNOWN_GPU = -1  # job_gpus.gpu when only the host is known
JOB_GPUS_KEY = "slurm"  # the `job_gpus` file of Slurm allocations

JOB_GPU_COLUMNS = [
    *("job_id", "attempt", "host", "gpu", "gpu_instance", "mig_profile", "gpu_model"),
    *("start_ts", "end_ts", "gpu_from"),
]
# evidence that may be gone at the next run: rows it gave are kept (step 4 above)
_LASTING_NOT = (gpu_from.SCONTROL, gpu_from.JOBSTATS_SUMMARY)

PAIRS_SCHEMA: dict[str, pl.DataType] = {
    "job_id": pl.String(),
    "host": pl.String(),
    "gpu": pl.Int16(),
    "gpu_instance": pl.Int16(),
    "mig_profile": pl.String(),
    "gpu_model": pl.String(),
}


def _samples(wh: Warehouse, cluster: str) -> tuple[str, frozenset[str]] | None:
    """The glob of the cluster's gpu_samples files and the columns they hold, or None."""
    base = wh.cluster_dir("gpu_samples", cluster)
    files = sorted(base.glob("date=*/*.parquet"))
    if not files:
        return None
    glob = str(base / "date=*" / "*.parquet").replace("'", "''")
    return glob, stored_columns(GPU_SAMPLES, files)


def pairs_from_samples(
    wh: Warehouse,
    cluster: str,
    jobs: pl.DataFrame,
    within: tuple[datetime, datetime] | None = None,
) -> pl.DataFrame:
    """(job_id, host, gpu) where gpu_samples carry the job's id (hpc_job) inside its interval
    (and, if given, inside `within` = [start, end): only those samples are read)."""
    found = _samples(wh, cluster)
    started = jobs.filter(pl.col("start_ts").is_not_null())
    if started.height == 0 or found is None:
        return pl.DataFrame(schema=PAIRS_SCHEMA)
    glob, present = found
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
    # files written before MIG support have no instance columns: read those as null
    device = ", ".join(
        f"s.{c}" if c in present else f"null as {c}"
        for c in ("gpu_instance", "mig_profile", "gpu_model")
    )
    con = duckdb.connect(":memory:")
    try:
        con.execute("SET TimeZone = 'UTC'")
        con.register("job_keys", keys.to_arrow())
        df = con.sql(
            f"""
            select distinct k.job_id, s.host, cast(s.gpu as smallint) as gpu, {device}
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
    return df.cast(PAIRS_SCHEMA) if df.height else pl.DataFrame(schema=PAIRS_SCHEMA)


def host_gpus_from_samples(
    wh: Warehouse,
    cluster: str,
    hosts: list[str],
    within: tuple[datetime | None, datetime | None] = (None, None),
) -> pl.DataFrame:
    """The GPUs that the samples of `hosts` show (host, gpu, gpu_minor, mig), read from
    [start, end) of `within` where given. `gpu_minor` is null where the telemetry carries none
    (or the files predate the column)."""
    found = _samples(wh, cluster)
    if found is None or not hosts:
        return pl.DataFrame(schema=HOST_GPUS_SCHEMA)
    glob, present = found
    minor = "max(s.gpu_minor)" if "gpu_minor" in present else "null"
    mig = "bool_or(s.gpu_instance is not null)" if "gpu_instance" in present else "false"
    start, end = within
    con = duckdb.connect(":memory:")
    try:
        con.execute("SET TimeZone = 'UTC'")
        df = con.sql(
            f"""
            select s.host, cast(s.gpu as smallint) as gpu, cast({minor} as smallint) as gpu_minor,
                   {mig} as mig
            from read_parquet('{glob}', hive_partitioning = true, union_by_name = true) as s
            where s.host in (select unnest($1::varchar[])) and s.gpu >= 0
              and ($2 is null or (s.date >= cast($2 as date) and s.ts >= $2))
              and ($3 is null or (s.date <= cast($3 as date) and s.ts < $3))
            group by s.host, s.gpu
            """,
            params=[hosts, start, end],
        ).pl()
    finally:
        con.close()
    return df.cast(HOST_GPUS_SCHEMA) if df.height else pl.DataFrame(schema=HOST_GPUS_SCHEMA)


def build_job_gpus(jobs: pl.DataFrame, evidence: list[pl.DataFrame]) -> pl.DataFrame:
    """job_gpus rows: each job's devices from the first frame of `evidence` that names any
    (frames of job_id, host, gpu, gpu_from; gpu_instance, mig_profile, gpu_model where the
    evidence gives them), else one gpu=-1 row per host (`unknown`). A job that holds no GPU
    (`gpus` = 0: no GPU in its TRES / GRES) has no rows.

    A job allocated MIG instances (`mig_profile` from its GRES, when `jobs` has the column)
    takes its devices only from evidence that names the instance (a frame with `gpu_instance`,
    the samples' job labels): Slurm numbers MIG devices in its own order, which does not name
    the parent GPU and the instance. Without such evidence they stay unknown (-1) with the
    profile, and the analysis resolves them later."""
    started = jobs.filter(pl.col("start_ts").is_not_null() & (pl.col("gpus").fill_null(1) > 0))
    for name in ("mig_profile", "gpu_model"):
        if name not in started.columns:
            started = started.with_columns(pl.lit(None, dtype=pl.String()).alias(name))
    # a job's attempt (a Slurm requeue's earlier runs, `ingest.slurm.source`), else 0
    attempt = pl.col("attempt") if "attempt" in started.columns else pl.lit(0)
    spans = started.select(
        "job_id", "start_ts", "end_ts", attempt.cast(pl.Int16()).alias("attempt")
    )
    details = started.select("job_id", "mig_profile", "gpu_model")
    whole_gpu_jobs = started.filter(pl.col("mig_profile").is_null()).select("job_id")
    have = pl.DataFrame(schema={"job_id": pl.String()})
    device: list[str | pl.Expr] = ["job_id", "host", pl.col("gpu").cast(pl.Int16()), "gpu_from"]
    parts: list[pl.DataFrame] = []
    for frame in evidence:
        if "gpu_instance" in frame.columns:
            rows = frame.select(*device, "gpu_instance", "mig_profile", "gpu_model")
        else:
            rows = (
                frame.join(whole_gpu_jobs, on="job_id", how="semi")
                .select(*device, pl.lit(None, dtype=pl.Int16()).alias("gpu_instance"))
                .join(details, on="job_id", how="left")
            )
        rows = rows.join(started.select("job_id"), on="job_id", how="semi").join(
            have, on="job_id", how="anti"
        )
        parts.append(rows)
        have = pl.concat([have, rows.select("job_id").unique()])
    unknown = (
        started.join(have, on="job_id", how="anti")
        .select("job_id", pl.col("hosts").alias("host"))
        .explode("host")
        .drop_nulls("host")
        .with_columns(
            pl.lit(UNKNOWN_GPU, dtype=pl.Int16()).alias("gpu"),
            pl.lit(gpu_from.UNKNOWN).alias("gpu_from"),
            pl.lit(None, dtype=pl.Int16()).alias("gpu_instance"),
        )
        .join(details, on="job_id", how="left")
    )
    columns = ["job_id", "host", "gpu", "gpu_instance", "mig_profile", "gpu_model", "gpu_from"]
    pairs = pl.concat(
        [p.select(columns) for p in [*parts, unknown]], how="vertical_relaxed"
    ).unique()
    return (
        pairs.join(spans, on="job_id", how="inner")
        .select(JOB_GPU_COLUMNS)
        .sort("job_id", "host", "gpu", "gpu_instance")
    )


def stored_minors(wh: Warehouse, cluster: str) -> pl.DataFrame:
    """The device numbers kept for the cluster's jobs (`job_gpu_minors`)."""
    return wh.read("job_gpu_minors", cluster, JOB_GPUS_KEY)


def _by_raw_or_display(rows: pl.DataFrame, jobs: pl.DataFrame) -> pl.DataFrame:
    """`rows` (job_id = Slurm's JobId, slurm_job_id = its display form) under the job ids of
    `jobs`: JobIDRaw where sacct printed it, else the display form."""
    if rows.height == 0 or jobs.height == 0:
        return rows.select(*MINORS_SCHEMA).clear()
    ids = jobs.select("job_id")
    by_display = jobs.select(pl.col("job_id").alias("jid"), "slurm_job_id").drop_nulls()
    return pl.concat(
        [
            rows.join(ids, on="job_id", how="semi").select(*MINORS_SCHEMA),
            rows.join(by_display, on="slurm_job_id", how="inner").select(
                pl.col("jid").alias("job_id"), "slurm_job_id", "host", "minor"
            ),
        ]
    ).unique()


@dataclass
class Ties:
    """The job_gpus rows of some jobs and what the device numbers gave."""

    rows: pl.DataFrame
    minors: MinorResolution


def tie_jobs(
    wh: Warehouse,
    cluster: str,
    jobs: pl.DataFrame,
    *,
    gres_idx: GresIdx = "minor",
    within: tuple[datetime, datetime] | None = None,
    extra: list[pl.DataFrame] | None = None,
) -> Ties:
    """The job_gpus rows of `jobs` (job_id, slurm_job_id, start_ts, end_ts, gpus, hosts,
    mig_profile, gpu_model) from every kind of evidence, in the order of the module's doc;
    `extra`: evidence frames a source read itself (a Jobstats summary's), tried after scontrol.
    With `within`, only the samples of [start, end) are read (a telemetry ingest's range)."""
    hosts = jobs["hosts"].explode().drop_nulls().unique().to_list() if jobs.height else []
    lo = jobs["start_ts"].min() if jobs.height else None
    since = lo if isinstance(lo, datetime) else None
    if within is not None:
        since = within[0] if since is None else max(since, within[0])
    host_gpus = host_gpus_from_samples(
        wh, cluster, hosts, (since, within[1] if within is not None else None)
    )
    kept = _by_raw_or_display(stored_minors(wh, cluster), jobs)
    resolution = resolve_minors(kept, host_gpus, gres_idx)
    stored = wh.read("job_gpus", cluster, JOB_GPUS_KEY)
    if "gpu_from" not in stored.columns:
        stored = stored.with_columns(pl.lit(None, dtype=pl.String()).alias("gpu_from"))
    same = ["job_id", "attempt"] if "attempt" in jobs.columns else ["job_id"]
    earlier = stored.filter((pl.col("gpu") >= 0) & pl.col("gpu_from").is_in(_LASTING_NOT)).join(
        jobs.select(same).cast({"attempt": pl.Int16()} if "attempt" in same else {}),
        on=same,
        how="semi",
    )
    evidence = [
        # a job's own devices (job-local indices, `job_local_gpus`) are no GPUs of the host
        whole_host_pairs(jobs, host_gpus.filter(~is_job_local(pl.col("gpu")))).with_columns(
            pl.lit(gpu_from.WHOLE_HOST).alias("gpu_from")
        ),
        resolution.pairs.with_columns(pl.lit(gpu_from.SCONTROL).alias("gpu_from")),
        *(extra or []),
        earlier.select("job_id", "host", "gpu", "gpu_from"),
        pairs_from_samples(wh, cluster, jobs, within).with_columns(
            pl.lit(gpu_from.TELEMETRY_LABEL).alias("gpu_from")
        ),
    ]
    return Ties(rows=build_job_gpus(jobs, evidence), minors=resolution)


def prune_minors(wh: Warehouse, cluster: str, older_than: datetime | None = None) -> None:
    """Drop the kept device numbers of jobs whose GPUs are all resolved, and those read before
    `older_than`."""
    kept = stored_minors(wh, cluster)
    if kept.height == 0:
        return
    rows = wh.read("job_gpus", cluster, JOB_GPUS_KEY)
    waiting = rows.filter(pl.col("gpu") == UNKNOWN_GPU).select("job_id").unique()
    done = rows.select("job_id").unique().join(waiting, on="job_id", how="anti")
    drop = pl.col("job_id").is_in(done["job_id"].implode())
    if older_than is not None:
        drop = drop | (pl.col("seen_ts") < older_than)
    if kept.filter(drop).height:
        wh.replace_rows_where("job_gpu_minors", cluster, JOB_GPUS_KEY, drop, kept.clear())


def fill_unknown_gpus(wh: Warehouse, cluster: str, start: datetime, end: datetime) -> int:
    """Give stored Slurm allocations with GPU index unknown (gpu = -1) the GPUs that the samples
    just written in [start, end) show (whole hosts, the minor numbers of kept scontrol IDX, job
    labels), as `ingest slurm` run after the telemetry would have. Called by telemetry ingests
    (reading only their own time range, so a cluster without job labels costs a scan of the new
    samples only); returns the jobs resolved."""
    stored = wh.read("job_gpus", cluster, JOB_GPUS_KEY)
    unknown = stored.filter(
        (pl.col("gpu") == UNKNOWN_GPU)
        & (pl.col("start_ts") < end)
        & (pl.col("end_ts").is_null() | (pl.col("end_ts") >= start))
    )
    if unknown.height == 0:
        return 0
    # the rows carry what build_job_gpus needs: the job's interval and its hosts; the job's
    # GPU count and display id are in `jobs`
    jobs = unknown.group_by("job_id", "attempt").agg(
        pl.col("start_ts").first(),
        pl.col("end_ts").first(),
        pl.col("host").alias("hosts"),
        pl.col("mig_profile").first(),
        pl.col("gpu_model").first(),
    )
    facts = wh.read("jobs", cluster, JOB_GPUS_KEY)
    if facts.height and "slurm_job_id" not in facts.columns:
        facts = facts.with_columns(pl.lit(None, dtype=pl.String()).alias("slurm_job_id"))
    facts = (
        facts.select("job_id", pl.col("gpus").cast(pl.Int32()), "slurm_job_id")
        if facts.height
        else pl.DataFrame(
            schema={"job_id": pl.String(), "gpus": pl.Int32(), "slurm_job_id": pl.String()}
        )
    )
    jobs = jobs.join(facts, on="job_id", how="left")
    resolved: set[str] = set()
    # one tie per attempt number: the evidence is per job id, each attempt has its interval
    for (number,), attempt_jobs in jobs.group_by("attempt"):
        ties = tie_jobs(wh, cluster, attempt_jobs, within=(start, end))
        resolved_ids = ties.rows.filter(pl.col("gpu") != UNKNOWN_GPU).select("job_id").unique()
        if ties.minors.refused:
            write_quarantine(
                wh,
                cluster,
                "slurm",
                f"scontrol IDX, samples {start.isoformat()}..{end.isoformat()}",
                ties.minors.refused,
            )
        if resolved_ids.height == 0:
            continue
        rows = ties.rows.join(resolved_ids, on="job_id", how="semi")
        ids = resolved_ids["job_id"].implode()
        where = pl.col("job_id").is_in(ids) & (pl.col("attempt") == number)
        wh.replace_rows_where("job_gpus", cluster, JOB_GPUS_KEY, where, rows)
        resolved.update(resolved_ids["job_id"].to_list())
    if resolved:
        prune_minors(wh, cluster)
    return len(resolved)
