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

Where the samples carry no job id (DCGM's default), allocations are tied by whole hosts or
scontrol captures, which a shift does not stop: every job is then measured hours off its own
work, silently. `time_zone_misfit` tells it by the GPUs themselves: a job's GPUs get busy where
it starts and idle where it ends, so on a sample of such allocations it compares how often the
utilization rises at the recorded starts (and falls at the ends) with how often it does whole
hours off them (±1..14 h), and says so when an offset fits clearly better than none.
`problems` gives them all, for the callers.
"""

from __future__ import annotations

import duckdb

from gpuwaste.warehouse.gpu_from import SCONTROL, WHOLE_HOST
from gpuwaste.warehouse.store import Warehouse

# An unresolved share worth a look (and a scan of the job-labelled samples): this many
# allocations, and this share of them all
SHIFT_MIN_UNRESOLVED, SHIFT_MIN_SHARE = 10, 0.1
# A job "meets its samples h hours off" when its first labelled sample is within this of
# start + h hours (a sampling interval and a scrape's delay are far less)
SHIFT_TOLERANCE_S = 600
# time_zone_misfit: the allocations it samples (the ended ones nearest the middle of the jobs'
# span, whose edges at every offset have samples), the offsets tried, the seconds looked at on
# each side of an edge (a few samples at any usual interval), the utilization step (points)
# that makes an edge a rise or a fall, and the edges an offset needs to be judged
FIT_ALLOCATIONS, FIT_MAX_HOURS, FIT_EDGE_S, FIT_STEP, FIT_MIN_EDGES = 500, 14, 300, 20, 100
# an offset fits "clearly better" when its net share of edges that step the right way (rises
# at starts and falls at ends, less the wrong way) is at least this, and at least FIT_RATIO
# times and FIT_MARGIN more than that of any other offset, 0 h included: a correct ingest
# whose jobs barely change their GPUs' utilization leaves every offset alike, and says nothing
FIT_MIN_NET, FIT_RATIO, FIT_MARGIN = 0.1, 2.0, 0.05

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
    h, side, advice = _zone_advice(int(hours))
    return (
        f"cluster '{cluster}': {unresolved:,} of {total:,} job x host allocations met no GPU "
        f"sample of their job, and for {near:,} of those {unmet_jobs:,} jobs the samples carrying "
        f"the job's id begin whole hours off its recorded start (most often {h} h {side}), "
        f"{advice}"
    )


def _zone_advice(hours: int) -> tuple[int, str, str]:
    """For jobs whose GPUs work `hours` after their recorded times (before, if negative): the
    hours, 'after' or 'before', and the end of the sentence naming the flag."""
    h = abs(hours)
    side, zone = ("after", "ahead of") if hours > 0 else ("before", "behind")
    return (
        h,
        side,
        f"as when the scheduler's times are read in a time zone {h} h {zone} their own: "
        "re-ingest the jobs with the right --timezone (the cluster's `timezone` key in "
        "gpuwaste.toml), e.g. --timezone UTC for times written in UTC.",
    )


def edge_fit(wh: Warehouse, cluster: str) -> list[tuple[int, int, float]]:
    """(hours, edges, net share) for each whole-hour offset -FIT_MAX_HOURS..FIT_MAX_HOURS of
    the recorded times, over a sample of `cluster`'s allocations tied by whole host or scontrol
    (FIT_ALLOCATIONS, ended, at least two edge windows long): an edge is the allocation's start
    (its GPU's mean utilization in the FIT_EDGE_S after it less that in the FIT_EDGE_S before)
    or its end (before less after), moved by the offset, where both sides have samples; the net
    share is the share of edges stepping at least FIT_STEP points the right way less the share
    stepping it the wrong way. One query; empty without such allocations or samples."""
    allocs = _glob(wh, "job_gpus", cluster, "*.parquet")
    samples = _glob(wh, "gpu_samples", cluster, "date=*/*.parquet")
    if allocs is None or samples is None:
        return []
    con = duckdb.connect(":memory:")
    try:
        con.execute("SET TimeZone = 'UTC'")
        rows = con.execute(
            f"""
            with tied as (
                select host, gpu, gpu_instance, start_ts, end_ts
                from read_parquet('{allocs}', union_by_name = true)
                where gpu >= 0 and gpu_from in ('{WHOLE_HOST}', '{SCONTROL}')
                    and end_ts - start_ts >= to_seconds(2 * $edge)
            ),
            middle as (select min(start_ts) + (max(end_ts) - min(start_ts)) / 2 as t from tied),
            allocs as (
                select tied.* from tied, middle
                order by abs(epoch(start_ts) - epoch(middle.t)), host, gpu, start_ts
                limit $n
            ),
            moved as (
                select host, gpu, gpu_instance, h, sign, t + to_hours(h) as t
                from allocs,
                    (select unnest(range(-$hours, $hours + 1)) as h),
                    (select unnest([start_ts, end_ts]) as t, unnest([1, -1]) as sign)
            ),
            -- each edge under every 2 * $edge bucket its window touches (at most two), so that
            -- the join pairs a sample with the edges of its own bucket only, not with every
            -- edge of its GPU
            edges as (
                select *, unnest(range(
                    floor((epoch(t) - $edge) / (2 * $edge))::bigint,
                    floor((epoch(t) + $edge) / (2 * $edge))::bigint + 1
                )) as bucket
                from moved
            ),
            near as (
                select host, gpu, gpu_instance, ts, util,
                    floor(epoch(ts) / (2 * $edge))::bigint as bucket
                from read_parquet('{samples}', hive_partitioning = true, union_by_name = true)
                where host in (select host from allocs)
                    and ts >= (select min(start_ts) from allocs) - to_hours($hours + 1)
                    and ts <= (select max(end_ts) from allocs) + to_hours($hours + 1)
            ),
            steps as (
                select e.h, e.sign * (
                    avg(s.util) filter (where s.ts >= e.t) - avg(s.util) filter (where s.ts < e.t)
                ) as step
                from edges as e join near as s
                    on s.host = e.host and s.gpu = e.gpu and s.bucket = e.bucket
                    and s.gpu_instance is not distinct from e.gpu_instance
                    and s.ts >= e.t - to_seconds($edge) and s.ts < e.t + to_seconds($edge)
                group by e.host, e.gpu, e.gpu_instance, e.h, e.sign, e.t
            )
            select h, count(step), avg((step >= $step)::int - (step <= -$step)::int)
            from steps where step is not null group by h order by h
            """,
            {
                "edge": FIT_EDGE_S,
                "n": FIT_ALLOCATIONS,
                "hours": FIT_MAX_HOURS,
                "step": FIT_STEP,
            },
        ).fetchall()
    finally:
        con.close()
    return [(int(h), int(n), float(net)) for h, n, net in rows]


def time_zone_misfit(wh: Warehouse, cluster: str) -> str | None:
    """One sentence when the GPUs of `cluster`'s allocations tied by whole host or scontrol
    step up and down clearly more often whole hours off their jobs' recorded starts and ends
    than at them (`edge_fit`), as when the scheduler's times are read in the wrong zone; else
    None."""
    fit = {h: (n, net) for h, n, net in edge_fit(wh, cluster) if n >= FIT_MIN_EDGES}
    if not fit:
        return None
    best = max(fit, key=lambda h: fit[h][1])
    n, net = fit[best]
    runner_up = max((v for h, (_, v) in fit.items() if h != best), default=0.0)
    at_zero = fit.get(0, (0, 0.0))[1]
    if best == 0 or net < max(FIT_MIN_NET, FIT_RATIO * runner_up, runner_up + FIT_MARGIN):
        return None
    h, side, advice = _zone_advice(best)
    return (
        f"cluster '{cluster}': the GPUs of jobs tied by whole host or scontrol get busy and "
        f"idle where the jobs start and end {h} h {side} their recorded times (of {n:,} "
        f"sampled starts and ends, net {net:.0%} step that way there, {at_zero:.0%} at the "
        f"recorded times), {advice}"
    )


def problems(wh: Warehouse, cluster: str) -> list[str]:
    """Every sentence `why_no_gpu_time`, `time_zone_shift` and (when that says nothing)
    `time_zone_misfit` have to say about `cluster`."""
    found = [why_no_gpu_time(wh, cluster), time_zone_shift(wh, cluster)]
    if found[1] is None:
        found[1] = time_zone_misfit(wh, cluster)
    return [p for p in found if p is not None]
