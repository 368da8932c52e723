"""Reads of the result tables shared by the dashboard, `gpuwaste job` and the exporter.

One job's rows and its GPUs' samples (the Job page, `gpuwaste job`), the running jobs idle on
all their GPUs (the "Running now" page, the exporter's idle-job series), and each source's
ingest state with its quarantined records (the Overview page, the exporter's pipeline health).
Each function takes a read-only DuckDB connection and returns a small polars frame; none of them
defines a metric: they select what `gpuwaste analyze` computed. No Streamlit here.

A device is a GPU or a MIG instance of one (docs/analyses.md#mig-instances): its key is
`DEVICE_KEY`, and `device_name` names it the same way on the Job page and in `gpuwaste job`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import duckdb
import polars as pl

from gpuwaste.warehouse.reading import read_frame

TIMELINE_POINTS = 720  # samples per device on the Job page (time-bucketed beyond that)
DEVICE_KEY = ("host", "gpu", "gpu_instance")  # gpu_instance: NULL for a whole GPU


def device_name(
    host: object, gpu: object, gpu_instance: object = None, mig_profile: object = None
) -> str:
    """`host:gpu` for a whole GPU, `host:gpu/gi<instance> (<profile>)` for a MIG instance."""
    name = f"{host}:{gpu}"
    if gpu_instance is None:
        return name
    return f"{name}/gi{gpu_instance}" + (f" ({mig_profile})" if mig_profile else "")


def device_of(row: Mapping[str, Any]) -> str:
    """`device_name` of a row with host, gpu, gpu_instance and mig_profile (job_gpu_usage's,
    idle_slots', a `gpu_keys` row)."""
    return device_name(row["host"], row["gpu"], row["gpu_instance"], row["mig_profile"])


# ----------------------------------------------------------------- one job
def job(con: duckdb.DuckDBPyConnection, cluster: str | None, job_id: str) -> pl.DataFrame:
    """The job_usage row(s) of a job id (one per cluster that has it, unless cluster given)."""
    where = "job_id = ?" + (" AND cluster = ?" if cluster else "")
    params = [job_id, cluster] if cluster else [job_id]
    return read_frame(con, f"SELECT * FROM job_usage WHERE {where} ORDER BY cluster", params)


def job_rows(con: duckdb.DuckDBPyConnection, table: str, cluster: str, job_id: str) -> pl.DataFrame:
    """A job's rows of job_gpu_usage, idle_slots or stable_phases, by attempt and device."""
    if table not in ("job_gpu_usage", "idle_slots", "stable_phases"):
        raise ValueError(f"{table} has no per-job rows")
    order = "attempt, host, gpu, gpu_instance NULLS FIRST" + (
        ", start_ts" if table != "job_gpu_usage" else ""
    )
    return read_frame(
        con,
        f"SELECT * FROM {table} WHERE cluster = ? AND job_id = ? ORDER BY {order}",
        [cluster, job_id],
    )


def job_timeline(
    con: duckdb.DuckDBPyConnection,
    cluster: str,
    job_id: str,
    points: int = TIMELINE_POINTS,
) -> pl.DataFrame:
    """gpu_samples of the job's devices over its allocation intervals (drill-down, not a
    metric): (host, gpu, gpu_instance, ts, util, mem_used_mib, power_w), one series per device
    (a MIG instance apart from its GPU's other instances; its power is its parent GPU's, as the
    exporter repeats it), averaged (util, power) and maxed (memory) into time buckets when there
    are more than `points` samples per device."""
    alloc = read_frame(
        con,
        "SELECT host, min(start_ts) AS lo, max(end_ts) AS hi FROM job_gpu_usage "
        "WHERE cluster = ? AND job_id = ? GROUP BY ALL",
        [cluster, job_id],
    )
    if alloc.height == 0:
        return pl.DataFrame(
            schema={"host": pl.String, "gpu": pl.Int16, "gpu_instance": pl.Int16,
                    "ts": pl.Datetime("us", "UTC"), "util": pl.Float64,
                    "mem_used_mib": pl.Float64, "power_w": pl.Float64}
        )  # fmt: skip
    lo: datetime = alloc["lo"].min()  # type: ignore[assignment]
    hi: datetime = alloc["hi"].max()  # type: ignore[assignment]
    span = max((hi - lo).total_seconds(), 1.0)
    bucket = max(1.0, span / points)
    hosts = sorted(set(alloc["host"].to_list()))
    return read_frame(
        con,
        f"""
        WITH a AS (
            SELECT host, gpu, gpu_instance, start_ts, end_ts
            FROM job_gpu_usage WHERE cluster = ? AND job_id = ?
        ), s AS (
            SELECT g.host, g.gpu, g.gpu_instance, g.ts, g.util, g.mem_used_mib, g.power_w
            FROM gpu_samples g
            WHERE g.cluster = ? AND g.date BETWEEN ? AND ? AND g.ts >= ? AND g.ts <= ?
              AND g.host IN ({", ".join("?" * len(hosts))})
        )
        SELECT s.host, s.gpu, s.gpu_instance,
               to_timestamp(floor(epoch(s.ts) / {bucket!r}) * {bucket!r}) AS ts,
               avg(s.util) AS util, max(s.mem_used_mib) AS mem_used_mib,
               avg(s.power_w) AS power_w
        FROM s JOIN a ON s.host = a.host AND s.gpu = a.gpu
                     AND s.gpu_instance IS NOT DISTINCT FROM a.gpu_instance
                     AND s.ts >= a.start_ts AND s.ts <= a.end_ts
        GROUP BY ALL ORDER BY s.host, s.gpu, s.gpu_instance NULLS FIRST, ts
        """,
        [cluster, job_id, cluster, lo.date(), (hi + timedelta(seconds=1)).date(), lo, hi, *hosts],
    )


# ----------------------------------------------------------------- energy
ENERGY_KINDS = ("used", "lost")  # the GPUs' energy, and its part in idle slots / never-used GPUs


def energy_joules(con: duckdb.DuckDBPyConnection, cluster: str | None = None) -> pl.DataFrame:
    """Per cluster and kind (`ENERGY_KINDS`), the joules of every analyzed job's GPUs
    (job_usage.energy_kwh, lost_energy_kwh x 3.6e6): the exporter's
    `gpuwaste_energy_joules_total{kind=...}` counts the settled part of it. Clusters with no power reading at all have
    no rows (no energy is not 0 J)."""
    where = "WHERE cluster = ?" if cluster else ""
    return read_frame(
        con,
        f"""
        SELECT cluster, kind, joules FROM (
            SELECT cluster, sum(energy_kwh) * 3.6e6 AS used, sum(lost_energy_kwh) * 3.6e6 AS lost
            FROM job_usage {where} GROUP BY cluster
        ) UNPIVOT (joules FOR kind IN (used, lost))
        ORDER BY cluster, kind DESC
        """,
        [cluster] if cluster else [],
    )


# ----------------------------------------------------------------- running now
def idle_now(
    con: duckdb.DuckDBPyConnection, where: str = "true", params: Sequence[Any] = ()
) -> pl.DataFrame:
    """Running jobs idle on every GPU of their current attempt up to the newest data, by the
    analyses' definition of idle [CloudBrain §IV-C]: each GPU either never used, or in an idle
    slot (idle_slots) that lasts to the allocation's end (for a running job, how far the data
    reached when `gpuwaste analyze` last ran, `as_of`). One row per job: since when all its GPUs
    have been idle (the latest of its GPUs' idle starts), for how long, on how many GPUs, and
    the GPU hours idle in that stretch; most idle GPU hours first.

    `where` (with `?` parameters `params`) restricts the jobs: a condition over job_usage's
    columns as `u.<column>`, e.g. the dashboard view's cluster, VCs, user and sizes (a period
    or state condition would make no sense: these jobs run now)."""
    return read_frame(
        con,
        f"""
        WITH run AS (
            SELECT u.cluster, u.job_id, u."user", u.vc, u.name, u.gpus, u.start_ts
            FROM job_usage u WHERE u.running AND ({where})
        ), g AS (
            SELECT a.cluster, a.job_id, a.attempt, a.host, a.gpu, a.gpu_instance, a.start_ts,
                   a.end_ts, a.never_used
            FROM job_gpu_usage a JOIN run USING (cluster, job_id)
            QUALIFY a.attempt = max(a.attempt) OVER (PARTITION BY a.cluster, a.job_id)
        ), per_gpu AS (
            -- since when this GPU is idle up to its allocation's end; NULL: busy or no data at
            -- the end (an idle slot reaching the end ends there, to the microsecond)
            SELECT g.cluster, g.job_id, g.host, g.gpu, g.end_ts,
                   CASE WHEN g.never_used THEN g.start_ts ELSE s.start_ts END AS idle_since
            FROM g LEFT JOIN idle_slots s
              ON s.cluster = g.cluster AND s.job_id = g.job_id AND s.attempt = g.attempt
             AND s.host = g.host AND s.gpu = g.gpu
             AND s.gpu_instance IS NOT DISTINCT FROM g.gpu_instance AND s.end_ts >= g.end_ts
        ), jobs AS (
            SELECT cluster, job_id, count(*) AS gpus_seen, max(idle_since) AS idle_since,
                   max(end_ts) AS as_of,
                   sum(epoch(end_ts - idle_since)) / 3600 AS idle_gpu_h
            FROM per_gpu GROUP BY ALL
            HAVING count(idle_since) = count(*)
        )
        SELECT run.cluster, run.job_id, run."user", run.vc, run.name, run.gpus,
               jobs.idle_since, round(epoch(jobs.as_of - jobs.idle_since) / 3600, 2) AS idle_h,
               round(jobs.idle_gpu_h, 2) AS idle_gpu_h, run.start_ts, jobs.as_of
        FROM jobs JOIN run USING (cluster, job_id)
        ORDER BY idle_gpu_h DESC, idle_h DESC, run.cluster, run.job_id
        """,
        list(params),
    )


# ----------------------------------------------------------------- pipeline
def source_states(con: duckdb.DuckDBPyConnection, cluster: str | None = None) -> pl.DataFrame:
    """Each source's watermark and last ingest (ingest_state), and how many of its records sit
    in quarantine: (cluster, source, watermark, updated_at, quarantined)."""
    where, params = ("cluster = ?", [cluster]) if cluster else ("true", [])
    return read_frame(
        con,
        f"""
        WITH q AS (
            SELECT cluster, source, count(*) AS quarantined FROM quarantine
            WHERE {where} GROUP BY ALL
        ), s AS (
            SELECT cluster, source, watermark, updated_at FROM ingest_state WHERE {where}
        )
        SELECT coalesce(s.cluster, q.cluster) AS cluster, coalesce(s.source, q.source) AS source,
               s.watermark, s.updated_at, coalesce(q.quarantined, 0) AS quarantined
        FROM s FULL OUTER JOIN q ON s.cluster = q.cluster AND s.source = q.source
        ORDER BY cluster, source
        """,
        params * 2,
    )


__all__ = [
    "DEVICE_KEY",
    "ENERGY_KINDS",
    "TIMELINE_POINTS",
    "device_name",
    "device_of",
    "energy_joules",
    "idle_now",
    "job",
    "job_rows",
    "job_timeline",
    "source_states",
]
