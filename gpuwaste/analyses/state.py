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
from datetime import date
from pathlib import Path

import duckdb
import polars as pl

from gpuwaste.warehouse.disk import writing
from gpuwaste.warehouse.schema import table
from gpuwaste.warehouse.store import Warehouse, atomic_copy_parquet, sql_string

STATE_DIR = "analyze_state"
# A change of what an existing result means (not only of its columns) bumps this, so the next
# analyze recomputes every job: 2: fingerprints by sql/plan/job_fingerprints.sql (allocations
# summed, not listed); 3: held idle NULL without memory readings, own waits shared like others'.
VERSION = 3
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
    inputs: dict[str, list[int]] = field(default_factory=dict)  # summary_inputs when it ran


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


SUMMARY_ONLY_TABLES = ("job_logs",)  # read by summaries alone, not by the per-job pass


def summary_inputs(wh: Warehouse, cluster: str) -> dict[str, list[int]]:
    """`<table>/<file>` -> [mtime_ns, size] of the files that only the summaries read (the job
    logs' signatures): when they change, the summaries run though no job changed."""
    out: dict[str, list[int]] = {}
    for name in SUMMARY_ONLY_TABLES:
        for path in sorted(wh.cluster_dir(name, cluster).glob("*.parquet")):
            if ".tmp-" in path.name:
                continue
            st = path.stat()
            out[f"{name}/{path.name}"] = [st.st_mtime_ns, st.st_size]
    return out


def changed_days(old: dict[str, list[int]], new: dict[str, list[int]]) -> set[date]:
    """UTC days whose sample files were added, rewritten or removed."""
    keys = {k for k in old.keys() | new.keys() if old.get(k) != new.get(k)}
    return {date.fromisoformat(k.split("/")[1]) for k in keys}


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


def fingerprints_file(data_dir: Path, cluster: str) -> Path | None:
    """The job fingerprints the last analyze of `cluster` recorded (plan/job_fingerprints.sql),
    if they are there and readable as such (None: recompute everything)."""
    _, jobs = _paths(data_dir, cluster)
    try:
        names = set(pl.read_parquet_schema(jobs))  # polars, not pyarrow: `gpuwaste job` needs none
    except (OSError, ValueError, pl.exceptions.PolarsError):
        return None
    return jobs if {"job_id", "fingerprint"} <= names else None


def save(
    data_dir: Path,
    cluster: str,
    state: AnalyzeState,
    fingerprints: Path,
    leave_out: list[str],
) -> None:
    """Record `state` and the job fingerprints in the parquet file `fingerprints`, but for the
    jobs `leave_out` (their analysis failed: the next run retries them)."""
    meta, jobs = _paths(data_dir, cluster)
    with duckdb.connect(":memory:") as con:
        atomic_copy_parquet(
            con,
            f"select * from read_parquet({sql_string(fingerprints)}) "
            "where not list_contains($1::varchar[], job_id)",
            jobs,
            [leave_out],
        )
    tmp = meta.with_name(meta.name + ".tmp")
    try:
        with writing(meta, f"{meta.name} was not written: the next run recomputes more"):
            tmp.write_text(json.dumps(state.__dict__, indent=1, sort_keys=True))
            os.replace(tmp, meta)
    finally:
        tmp.unlink(missing_ok=True)
