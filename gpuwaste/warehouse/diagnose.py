"""Why the analyses will find no GPU time for a cluster, read from the fact tables alone.

GPU time is allocation time: a job counts GPU-seconds only through its `job_gpus` rows, and an
allocation whose GPU index is unknown (gpu = -1) only once other evidence resolves it: the job
holds whole hosts, an scontrol capture names its GPUs, or a GPU sample carries the job's id
(DCGM `hpc_job`; `gpuwaste/warehouse/gpu_from.py`). So a cluster whose jobs hold no allocation, or only unresolvable
ones, gives all-zero results however good its samples are. `why_no_gpu_time` says which of
these it is, in one sentence with the fix, for the ingest summary line and for `analyze`.
"""

from __future__ import annotations

import duckdb

from gpuwaste.warehouse.store import Warehouse

# jobs.source -> where its allocations come from, and how to give them
_ALLOCATION_HINTS = {
    "csv": "the mapping's [jobs] table maps no `allocation` (per-host GPU indices) or `hosts` "
    "column, or it is empty for every job",
    "slurm": "the sacct output names no hosts for them (add NodeList to its --format)",
}
_ALLOCATION_HINTS["parquet"] = _ALLOCATION_HINTS["csv"]


def _glob(wh: Warehouse, name: str, cluster: str, pattern: str) -> str | None:
    base = wh.cluster_dir(name, cluster)
    if not any(base.glob(pattern)):
        return None
    return str(base / pattern).replace("'", "''")


def why_no_gpu_time(wh: Warehouse, cluster: str) -> str | None:
    """One sentence saying why `cluster` has no measurable GPU time, or None when some of its
    jobs hold GPUs the analyses can see (or it has no jobs: analyze says so itself)."""
    jobs = _glob(wh, "jobs", cluster, "*.parquet")
    if jobs is None:
        return None
    con = duckdb.connect(":memory:")
    try:
        n_jobs, started, with_gpus, sources = con.execute(
            "select count(*), count(start_ts), count(*) filter (where gpus is null or gpus > 0), "
            "list(distinct source order by source) "
            f"from read_parquet('{jobs}', union_by_name = true)"
        ).fetchall()[0]
        allocs = _glob(wh, "job_gpus", cluster, "*.parquet")
        known = unknown = 0
        if allocs is not None:
            known, unknown = con.execute(
                "select count(*) filter (where gpu >= 0), count(*) filter (where gpu < 0) "
                f"from read_parquet('{allocs}', union_by_name = true)"
            ).fetchall()[0]
        if known:
            return None
        if not unknown:
            return _no_allocations(cluster, n_jobs, started, with_gpus, sources)
        samples = _glob(wh, "gpu_samples", cluster, "date=*/*.parquet")
        labelled = samples is not None and bool(
            con.execute(
                f"select count(*) from (select 1 from read_parquet('{samples}', "
                "union_by_name = true) where job_id is not null limit 1)"
            ).fetchall()[0][0]
        )
    finally:
        con.close()
    if labelled:
        return None  # analyze resolves what it can; it counts the rest itself
    seen = "carries a job id (DCGM hpc_job)" if samples is not None else "is ingested yet"
    return (
        f"cluster '{cluster}': the GPU index of all {unknown} job x host allocations is unknown "
        f"(gpu = -1) and no GPU sample {seen} to resolve them, so the analyses find 0 "
        "GPU-seconds; "
        "give `scontrol show job -d` captures (--scontrol FILE or FOLDER, or "
        "[clusters.slurm] scontrol_command at every ingest), per-host GPU indices "
        "(`allocation`), or telemetry whose samples carry the job id (deploy/slurm's prolog "
        "names it for the DCGM exporter)."
    )


def _no_allocations(
    cluster: str, n_jobs: int, started: int, with_gpus: int, sources: list[str]
) -> str:
    fix = ""
    if not with_gpus:
        what = f"none of its {n_jobs} jobs holds a GPU (gpus = 0: CPU-only jobs)"
    elif not started:
        what = f"none of its {n_jobs} jobs has a start time (none started, or no Start column)"
    else:
        what = f"its {n_jobs} jobs hold no GPU allocation (no job_gpus rows)"
        hints = [_ALLOCATION_HINTS[s] for s in sources if s in _ALLOCATION_HINTS]
        fix = f": {hints[0]}" if hints else ""
    return f"cluster '{cluster}': {what}, so the analyses find 0 GPU-seconds{fix}."
