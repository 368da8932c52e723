"""Why the analyses will find no GPU time for a cluster, read from the fact tables alone.

GPU time is allocation time: a job counts GPU-seconds only through its `job_gpus` rows, and an
allocation whose GPU index is unknown (gpu = -1) only once other evidence resolves it: the job
holds whole hosts, an scontrol capture names its GPUs, or a GPU sample carries the job's id
(DCGM `hpc_job`; `gpuwaste/warehouse/gpu_from.py`). So a cluster whose jobs hold no allocation, or only unresolvable
ones, gives all-zero results however good its samples are. `why_no_gpu_time` says which of
these it is, in one sentence with the fix, for the ingest summary line and for `analyze`.

An allocation also stays unresolved when the scheduler's times were read in the wrong time zone
(`--timezone`, the cluster's `timezone` key): every job then sits whole hours off its samples,
and the short ones meet none. `time_zone_shift` tells that apart from missing telemetry by the
samples that carry the job's id: if they begin the same whole number of hours after (or before)
the recorded start of most such jobs, the times are shifted, and it says so.
`problems` gives both, for the callers.
"""

from __future__ import annotations

import duckdb

from gpuwaste.warehouse.store import Warehouse

# An unresolved share worth a look (and a scan of the job-labelled samples): this many
# allocations, and this share of them all
SHIFT_MIN_UNRESOLVED, SHIFT_MIN_SHARE = 10, 0.1
# A job "meets its samples h hours off" when its first labelled sample is within this of
# start + h hours (a sampling interval and a scrape's delay are far less)
SHIFT_TOLERANCE_S = 600

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


def time_zone_shift(wh: Warehouse, cluster: str) -> str | None:
    """One sentence when many of `cluster`'s allocations met no GPU sample of their job while
    most of those jobs' labelled samples begin the same whole number of hours off their
    recorded start (the scheduler's times read in the wrong zone; a zone that changes to or
    from summer time inside the window shifts some jobs one hour more or less); else None."""
    allocs = _glob(wh, "job_gpus", cluster, "*.parquet")
    samples = _glob(wh, "gpu_samples", cluster, "date=*/*.parquet")
    if allocs is None or samples is None:
        return None
    con = duckdb.connect(":memory:")
    try:
        con.execute("SET TimeZone = 'UTC'")
        con.execute(
            "create temp view allocs as select * "
            f"from read_parquet('{allocs}', union_by_name = true)"
        )
        unresolved, total = con.execute(
            "select count(*) filter (where gpu < 0), count(*) from allocs"
        ).fetchall()[0]
        if unresolved < max(SHIFT_MIN_UNRESOLVED, SHIFT_MIN_SHARE * total):
            return None
        rows = con.execute(
            f"""
            with unmet as (
                select job_id, min(start_ts) as start_ts from allocs
                where gpu < 0 and start_ts is not null group by job_id
            ),
            labelled as (
                select job_id, min(ts) as first_ts
                from read_parquet('{samples}', hive_partitioning = true, union_by_name = true)
                where job_id in (select job_id from unmet)
                group by job_id
            ),
            leads as (
                select
                    round((epoch(l.first_ts) - epoch(u.start_ts)) / 3600) as hours,
                    abs(epoch(l.first_ts) - epoch(u.start_ts) - 3600 * hours) <= $1 as whole
                from unmet as u join labelled as l using (job_id)
            )
            select
                mode(hours) filter (where whole and hours != 0) as hours,
                count(*) filter (where whole and hours != 0) as near,
                (select count(*) from unmet) as unmet_jobs
            from leads
            """,
            [SHIFT_TOLERANCE_S],
        ).fetchall()
    finally:
        con.close()
    hours, near, unmet_jobs = rows[0]
    if hours is None or near < max(SHIFT_MIN_UNRESOLVED // 2, unmet_jobs / 2):
        return None
    h = int(abs(hours))
    side, zone = ("after", "ahead of") if hours > 0 else ("before", "behind")
    return (
        f"cluster '{cluster}': {unresolved:,} of {total:,} job x host allocations met no GPU "
        f"sample of their job, and for {near:,} of those {unmet_jobs:,} jobs the samples carrying "
        f"the job's id begin whole hours off its recorded start (most often {h} h {side}), as "
        f"when the scheduler's times are read in a time zone {h} h {zone} their own: re-ingest the jobs with the right "
        "--timezone (the cluster's `timezone` key in gpuwaste.toml), e.g. --timezone UTC for "
        "times written in UTC."
    )


def problems(wh: Warehouse, cluster: str) -> list[str]:
    """Every sentence `why_no_gpu_time` and `time_zone_shift` have to say about `cluster`."""
    found = (why_no_gpu_time(wh, cluster), time_zone_shift(wh, cluster))
    return [p for p in found if p is not None]
