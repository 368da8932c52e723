"""Which GPUs a scheduler allocation held, when the scheduler names hosts but not GPU indices.

Shared by the sources: Slurm (and tabular exports with host-only allocations) write `job_gpus`
rows; the telemetry sources (Prometheus, OpenMetrics files) fill in the indices later. For each
job, in order of preference, the indices come from
1. `scontrol show job -d` output when supplied (Slurm only);
2. the DCGM `hpc_job` label of `gpu_samples` in the warehouse: every device (host, gpu, MIG
   instance) whose samples carry the job's id (or, for an array task, its raw id) inside the
   job's interval, with the instance's profile and the model;
3. the GPUs of the job's Jobstats summary (Slurm's AdminComment, `job_gpu_summaries`), named
   by minor number: the NVML index where samples of the host map that minor number to one
   (`gpu_samples.gpu_minor`), else **the minor number itself**, which equals the index where
   the driver numbers the devices in PCI order as NVML does, and is at least the same GPU
   every time on the same host (`minor_indices`);
4. otherwise one row per host with **gpu = -1 (`UNKNOWN_GPU`), meaning "index unknown"**.
`fill_unknown_gpus` resolves rows of the last kind when telemetry arrives after the jobs, so the
indices are the same whichever source arrived first.
"""

from __future__ import annotations

from datetime import datetime

import duckdb
import polars as pl

from gpuwaste.warehouse.catalog import stored_columns
from gpuwaste.warehouse.schema import GPU_SAMPLES
from gpuwaste.warehouse.store import Warehouse

UNKNOWN_GPU = -1  # job_gpus.gpu when only the host is known
JOB_GPUS_KEY = "slurm"  # the `job_gpus` file of Slurm allocations

JOB_GPU_COLUMNS = [
    *("job_id", "attempt", "host", "gpu", "gpu_instance", "mig_profile", "gpu_model"),
    *("start_ts", "end_ts"),
]

PAIRS_SCHEMA: dict[str, pl.DataType] = {
    "job_id": pl.String(),
    "host": pl.String(),
    "gpu": pl.Int16(),
    "gpu_instance": pl.Int16(),
    "mig_profile": pl.String(),
    "gpu_model": pl.String(),
}


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
        return pl.DataFrame(schema=PAIRS_SCHEMA)
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
    # files written before MIG support have no instance columns: read those as null
    present = stored_columns(GPU_SAMPLES, sorted(base.glob("date=*/*.parquet")))
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


def minor_indices(wh: Warehouse, cluster: str, hosts: list[str]) -> pl.DataFrame:
    """(host, gpu_minor, gpu): the NVML index of each GPU minor number of `hosts`, as the
    samples show it (telemetry whose series carry both: the `gpu_minor` column of
    `gpu_samples`). Empty where no sample file has that column."""
    schema = {"host": pl.String(), "gpu_minor": pl.Int16(), "gpu": pl.Int16()}
    files = sorted(wh.cluster_dir("gpu_samples", cluster).glob("date=*/*.parquet"))
    if not hosts or "gpu_minor" not in stored_columns(GPU_SAMPLES, files):
        return pl.DataFrame(schema=schema)
    glob = str(wh.cluster_dir("gpu_samples", cluster) / "date=*" / "*.parquet").replace("'", "''")
    con = duckdb.connect(":memory:")
    try:
        df = con.sql(
            f"""
            select distinct host, cast(gpu_minor as smallint) as gpu_minor,
                   cast(gpu as smallint) as gpu
            from read_parquet('{glob}', hive_partitioning = true, union_by_name = true)
            where gpu_minor is not null and host in (select unnest($1::varchar[]))
            """,
            params=[hosts],
        ).pl()
    finally:
        con.close()
    # a minor number seen at two indices (a renumbering) ties nothing: the minor stays
    return df.filter(pl.len().over("host", "gpu_minor") == 1).cast(schema)


def build_job_gpus(
    jobs: pl.DataFrame,
    scontrol_pairs: pl.DataFrame,
    sample_pairs: pl.DataFrame,
    summary_pairs: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """job_gpus rows: indices from scontrol, else from samples, else from the job's Jobstats
    summary (`summary_pairs`: job_id, host, gpu), else one gpu=-1 row per host.
    A job that holds no GPU (`gpus` = 0: no GPU in its TRES / GRES) has no rows.

    A job allocated MIG instances (`mig_profile` from its GRES, when `jobs` has the column)
    takes no index from scontrol: Slurm numbers MIG devices in its own order, which does not
    name the parent GPU and the instance. Its devices come from the samples' job labels, else
    they stay unknown (-1) with the profile, and the analysis resolves them later."""
    started = jobs.filter(pl.col("start_ts").is_not_null() & (pl.col("gpus").fill_null(1) > 0))
    for name in ("mig_profile", "gpu_model"):
        if name not in started.columns:
            started = started.with_columns(pl.lit(None, dtype=pl.String()).alias(name))
    spans = started.select("job_id", "start_ts", "end_ts")
    details = started.select("job_id", "mig_profile", "gpu_model")
    whole_gpu_jobs = started.filter(pl.col("mig_profile").is_null()).select("job_id")
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
    from_sc = sc.join(whole_gpu_jobs, on="job_id", how="semi")
    have = from_sc.select("job_id").unique()
    from_samples = sample_pairs.join(have, on="job_id", how="anti")
    have = pl.concat([have, from_samples.select("job_id").unique()])
    from_summary = (
        summary_pairs.select("job_id", "host", "gpu")
        .join(whole_gpu_jobs, on="job_id", how="semi")
        .join(have, on="job_id", how="anti")
        if summary_pairs is not None
        else pl.DataFrame(schema={k: PAIRS_SCHEMA[k] for k in ("job_id", "host", "gpu")})
    )
    have = pl.concat([have, from_summary.select("job_id").unique()])
    unknown = (
        started.join(have, on="job_id", how="anti")
        .select("job_id", pl.col("hosts").alias("host"))
        .explode("host")
        .drop_nulls("host")
        .with_columns(pl.lit(UNKNOWN_GPU, dtype=pl.Int16()).alias("gpu"))
    )
    no_instance = pl.lit(None, dtype=pl.Int16()).alias("gpu_instance")
    device: list[str | pl.Expr] = ["job_id", "host", pl.col("gpu").cast(pl.Int16())]
    pairs = pl.concat(
        [
            from_sc.select(*device, no_instance).join(details, on="job_id", how="left"),
            from_samples.select(*device, "gpu_instance", "mig_profile", "gpu_model"),
            from_summary.select(*device, no_instance).join(details, on="job_id", how="left"),
            unknown.select(*device, no_instance).join(details, on="job_id", how="left"),
        ],
        how="vertical_relaxed",
    ).unique()
    return (
        pairs.join(spans, on="job_id", how="inner")
        .with_columns(pl.lit(0, dtype=pl.Int16()).alias("attempt"))
        .select(JOB_GPU_COLUMNS)
        .sort("job_id", "host", "gpu", "gpu_instance")
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
        pl.col("mig_profile").first(),
        pl.col("gpu_model").first(),
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
