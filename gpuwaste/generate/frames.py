"""The generated jobs as warehouse-shaped polars frames (architecture.md: `jobs`, `job_gpus`)."""

from __future__ import annotations

import polars as pl

from gpuwaste.generate.model import Cluster

TS = pl.Datetime("us", "UTC")


def _ts(cluster: Cluster, rel: list[int | None]) -> pl.Series:
    t0 = cluster.spec.t0
    return pl.Series(
        [None if r is None else (t0 + r) * 1_000_000 for r in rel], dtype=pl.Int64
    ).cast(TS)


def jobs_frame(cluster: Cluster) -> pl.DataFrame:
    """One row per Slurm job: cluster, job_id (JobIDRaw, the DCGM hpc_job value), user, vc, name,
    state (passed|killed|unsuccessful|running), raw_state, submit_ts, start_ts, end_ts (null while
    running; start == end for jobs cancelled before they started), gpus, is_debug, source."""
    jobs = cluster.jobs
    return pl.DataFrame(
        {
            "cluster": pl.Series([cluster.spec.cluster] * len(jobs), dtype=pl.String),
            "job_id": pl.Series([j.job_id for j in jobs], dtype=pl.String),
            "user": pl.Series([j.user for j in jobs], dtype=pl.String),
            "vc": pl.Series([j.vc for j in jobs], dtype=pl.String),
            "name": pl.Series([j.name for j in jobs], dtype=pl.String),
            "state": pl.Series([j.state for j in jobs], dtype=pl.String),
            "raw_state": pl.Series([j.raw_state for j in jobs], dtype=pl.String),
            "submit_ts": _ts(cluster, [j.submit for j in jobs]),
            "start_ts": _ts(cluster, [j.start for j in jobs]),
            "end_ts": _ts(cluster, [j.end for j in jobs]),
            "gpus": pl.Series([j.gpus for j in jobs], dtype=pl.Int32),
            "is_debug": pl.Series([j.is_debug for j in jobs], dtype=pl.Boolean),
            "source": pl.Series(["generator"] * len(jobs), dtype=pl.String),
        }
    )


def job_gpus_frame(cluster: Cluster) -> pl.DataFrame:
    """One row per job x allocated GPU: cluster, job_id, attempt (always 0: one Slurm job is one
    allocation), host, gpu, start_ts, end_ts (null while running)."""
    rows = [(j, cluster.hosts[h].name, g) for j in cluster.jobs for h, g in j.alloc]
    return pl.DataFrame(
        {
            "cluster": pl.Series([cluster.spec.cluster] * len(rows), dtype=pl.String),
            "job_id": pl.Series([j.job_id for j, _, _ in rows], dtype=pl.String),
            "attempt": pl.Series([0] * len(rows), dtype=pl.Int16),
            "host": pl.Series([h for _, h, _ in rows], dtype=pl.String),
            "gpu": pl.Series([g for _, _, g in rows], dtype=pl.Int16),
            "start_ts": _ts(cluster, [j.start for j, _, _ in rows]),
            "end_ts": _ts(cluster, [j.end for j, _, _ in rows]),
        }
    )
