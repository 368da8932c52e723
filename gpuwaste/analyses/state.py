"""What the last `gpuwaste analyze` saw, so that the next one recomputes only what changed.

Per cluster, `<data_dir>/analyze_state/<cluster>.json` records when the run finished and the newest
GPU sample it saw (`gpuwaste.analyses.freshness`), the thresholds, the watermark the running jobs
were analyzed up to, the columns of the result tables (a gpuwaste version that adds
one recomputes every job), and the (mtime, size) of every sample partition file; and
`<cluster>.jobs.parquet` records a fingerprint of each job's record and allocations with the UTC
days its allocation spans. Written last, after the result tables, so a crash only means more work
next time, never a missed change.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path

import duckdb
import polars as pl

from gpuwaste.warehouse.schema import table
from gpuwaste.warehouse.store import Warehouse, atomic_write_parquet

STATE_DIR = "analyze_state"
VERSION = 1
SAMPLE_TABLES = ("gpu_samples", "host_samples")


@dataclass
class AnalyzeState:
    thresholds: str = ""
    as_of: str = ""
    partitions: dict[str, list[int]] = field(default_factory=dict)
    version: int = VERSION
    results_schema: str = ""
    ran_at: str = ""  # when this analyze finished (UTC, ISO); empty in states before it existed
    samples_until: str = ""  # the newest GPU sample it saw (UTC, ISO); empty: no samples


def results_schema(names: tuple[str, ...]) -> str:
    """The result tables' names, columns and types, as one string to compare across runs."""
    return ";".join(
        f"{name}:" + ",".join(f"{c}={d}" for c, d in table(name).columns.items())
        for name in sorted(names)
    )


def partition_signatures(wh: Warehouse, cluster: str) -> dict[str, list[int]]:
    """`<table>/<date>` -> [mtime_ns, size] for every sample partition file of the cluster."""
    out: dict[str, list[int]] = {}
    for name in SAMPLE_TABLES:
        base = wh.cluster_dir(name, cluster)
        for path in sorted(base.glob("date=*/*.parquet")):
            if ".tmp-" in path.name:
                continue
            st = path.stat()
            key = f"{name}/{path.parent.name.split('=', 1)[1]}/{path.name}"
            out[key] = [st.st_mtime_ns, st.st_size]
    return out


def changed_days(old: dict[str, list[int]], new: dict[str, list[int]]) -> set[date]:
    """UTC days whose sample files were added, rewritten or removed."""
    keys = {k for k in old.keys() | new.keys() if old.get(k) != new.get(k)}
    return {date.fromisoformat(k.split("/")[1]) for k in keys}


def job_fingerprints(con: duckdb.DuckDBPyConnection, cluster: str, as_of: datetime) -> pl.DataFrame:
    """job_id, fingerprint of its record and allocations, first and last UTC day it spans,
    whether it runs, and the first of its hosts (by name; NULL without allocations)."""
    return con.sql(
        """
        with j as (select * from jobs where cluster = $1),
        g as (
            select job_id,
                   string_agg(concat_ws('|', attempt, host, gpu, start_ts, end_ts), ';'
                              order by attempt, host, gpu, start_ts) as allocs,
                   min(start_ts) as first_ts, max(coalesce(end_ts, $2::timestamptz)) as last_ts,
                   min(host) as first_host
            from job_gpus where cluster = $1 group by job_id
        )
        select j.job_id,
               md5(concat_ws('|', j.user, j.vc, j.name, j.state, j.raw_state, j.submit_ts,
                   j.start_ts, j.end_ts, j.gpus, j.is_debug, coalesce(g.allocs, ''))) as fingerprint,
               coalesce(g.first_ts, j.start_ts)::date as first_day,
               coalesce(g.last_ts, j.end_ts, $2::timestamptz)::date as last_day,
               j.end_ts is null or j.state = 'running' as running,
               g.first_host
        from j left join g using (job_id)
        """,
        params=[cluster, as_of],
    ).pl()


def _paths(data_dir: Path, cluster: str) -> tuple[Path, Path]:
    d = data_dir / STATE_DIR
    return d / f"{cluster}.json", d / f"{cluster}.jobs.parquet"


def load_meta(data_dir: Path, cluster: str) -> AnalyzeState | None:
    """The recorded state of the last analyze of `cluster` (None: none, or unreadable)."""
    meta, _ = _paths(data_dir, cluster)
    try:
        state = AnalyzeState(**json.loads(meta.read_text()))
    except (OSError, ValueError, TypeError):
        return None
    return state if state.version == VERSION else None


def load(data_dir: Path, cluster: str) -> tuple[AnalyzeState, pl.DataFrame] | None:
    state = load_meta(data_dir, cluster)
    _, jobs = _paths(data_dir, cluster)
    if state is None:
        return None
    try:
        fps = pl.read_parquet(jobs)
    except (OSError, ValueError):
        return None  # unreadable state: recompute everything
    return state, fps


def save(data_dir: Path, cluster: str, state: AnalyzeState, fingerprints: pl.DataFrame) -> None:
    meta, jobs = _paths(data_dir, cluster)
    atomic_write_parquet(fingerprints, jobs)
    tmp = meta.with_name(meta.name + ".tmp")
    tmp.write_text(json.dumps(state.__dict__, indent=1, sort_keys=True))
    os.replace(tmp, meta)
