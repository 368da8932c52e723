-- grain: one row per (idle threshold, job) a rule would have cancelled: the cancel point, why
--        (idle or the interactive time limit), the GPU seconds reclaimed, and the busy GPU seconds
--        after the cancel point (work lost; > 0 makes the hit wrongful). Seconds to the millisecond.
-- sources: policy_jobs (sql/act/policy_jobs.sql), job_gpu_usage, idle_slots.
-- variables: idle_hours (double[]: the thresholds swept), grace_s (double: no cancel before
--            start + grace), max_interactive_s (double; null: no time limit for interactive jobs).
-- Definitions (docs/analyses.md#replaying-enforcement-rules):
--   * a GPU is idle inside its idle slots (the analyses' idle slots: idle samples, no missing data
--     inside, longer than idle_slot_min_s) and, when it is never used, over its whole allocation;
--   * the job is idle where every GPU it holds at that moment is idle (job level, as Job Defense
--     Shield and OpenPAI judge); a job idle stretch is a maximal run of such time;
--   * the idle cancel point for threshold H is the earliest t >= start + grace with the job idle
--     over [t - H, t] (t at most the stretch's end, and before the job's end); an interactive
--     job is also cancelled at start + max_interactive_s; the earlier of the two wins;
--   * after the cancel point t, a GPU's time outside its idle intervals is busy or missing data:
--     work lost counts it minus the GPU's missing data (the busy time certainly after t);
--     work_lost_max_s counts it all (as if the missing data lay before t).
--   * with count_looks_busy (policy_jobs.counted_idle: a job that looks busy, GPU_UTIL high while
--     SM/tensor activity is near zero), every GPU of the job is idle over its whole allocation,
--     as a never-used GPU is, and its cancels say so in their reason.
-- Jobs are numbered once (k; materialized, so every reference sees the same numbers), so that
-- the joins after that compare an integer rather than (cluster, job_id).
with

thresholds as (
    select unnest(getvariable('idle_hours')::double[]) as idle_hours
),

job_keys as materialized (
    select cluster, job_id, start_ts, interactive, counted_idle, row_number() over () as k
    from policy_jobs
),

gpus as (
    select
        j.k, g.attempt, g.host, g.gpu, g.start_ts, g.end_ts,
        g.never_used or j.counted_idle as never_used, g.missing_s
    from job_gpu_usage as g
    join job_keys as j using (cluster, job_id)
    where g.alloc_s > 0
),

idle as (
    select j.k, s.attempt, s.host, s.gpu, s.start_ts, s.end_ts, s.duration_s, false as never_used
    from idle_slots as s
    join job_keys as j using (cluster, job_id)
    where not j.counted_idle  -- idle over the whole allocation below
    union all
    select k, attempt, host, gpu, start_ts, end_ts, epoch(end_ts - start_ts), true
    from gpus
    where never_used
),

-- Only idle time lasting at least the shortest threshold can make a cancel. Most jobs hold all
-- their GPUs over one window (one attempt); for them, a job idle stretch that long lies inside
-- one idle slot of each used GPU, so it is [latest slot start, earliest slot end] when each used
-- GPU has exactly one slot that long (never-used GPUs are idle over the whole window): a group-by
-- per job. The other jobs that can have such a stretch go through the general sweep below.
windows as (
    select
        k,
        count(*) - count(*) filter (where never_used) as used_gpus,
        min(start_ts) = max(start_ts) and min(end_ts) = max(end_ts) as one_window,
        min(start_ts) as alloc_from,
        max(end_ts) as end_ts
    from gpus
    group by k
),

long_slots as (
    select
        i.k,
        count(*) as slots,
        count(distinct (i.attempt, i.host, i.gpu)) as slot_gpus,
        max(i.start_ts) as idle_from,
        min(i.end_ts) as idle_to
    from idle as i
    where not i.never_used
      and i.duration_s >= (select min(idle_hours) from thresholds) * 3600
    group by i.k
),

shapes as (
    select
        w.k, w.alloc_from, w.end_ts, l.idle_from, l.idle_to,
        w.one_window and coalesce(l.slots, 0) = w.used_gpus
            and coalesce(l.slot_gpus, 0) = w.used_gpus as simple,
        not w.one_window
            or (coalesce(l.slot_gpus, 0) = w.used_gpus and l.slots > w.used_gpus) as swept
    from windows as w
    left join long_slots as l using (k)
),

simple_stretches as (
    select
        k,
        greatest(coalesce(idle_from, alloc_from), alloc_from) as idle_from,
        least(coalesce(idle_to, end_ts), end_ts) as idle_to
    from shapes
    where simple
),

-- The general sweep: +1/-1 events of allocations and idle intervals, summed in time order per
-- job; the job is idle where every GPU it holds is idle.
changes as (
    select k, ts, sum(d_alloc) as d_alloc, sum(d_idle) as d_idle
    from (
        select k, start_ts as ts, 1 as d_alloc, 0 as d_idle from gpus
        union all
        select k, end_ts, -1, 0 from gpus
        union all
        select k, start_ts, 0, 1 from idle
        union all
        select k, end_ts, 0, -1 from idle
    )
    semi join (select k from shapes where swept) using (k)
    group by k, ts
),

segments as (
    select k, ts, next_ts, allocated > 0 and idle_gpus = allocated as all_idle
    from (
        select
            k, ts,
            sum(d_alloc) over w as allocated,
            sum(d_idle) over w as idle_gpus,
            lead(ts) over w as next_ts
        from changes
        window w as (partition by k order by ts rows unbounded preceding)
    )
    where next_ts is not null
),

swept_stretches as (
    select k, min(ts) as idle_from, max(next_ts) as idle_to
    from (
        select
            *,
            sum(case when all_idle then 0 else 1 end) over (
                partition by k order by ts rows unbounded preceding
            ) as run
        from segments
    )
    where all_idle
    group by k, run
),

stretches as (
    select * from simple_stretches
    union all
    select * from swept_stretches
),

idle_cancels as (
    select k, idle_hours, min(cancel_ts) as cancel_ts
    from (
        select
            s.k, t.idle_hours, s.idle_to, w.end_ts,
            greatest(
                s.idle_from + to_seconds(t.idle_hours * 3600),
                j.start_ts + to_seconds(getvariable('grace_s')::double)
            ) as cancel_ts
        from stretches as s
        join job_keys as j using (k)
        join windows as w using (k)
        join thresholds as t on epoch(s.idle_to - s.idle_from) >= t.idle_hours * 3600
    )
    where cancel_ts <= idle_to and cancel_ts < end_ts
    group by k, idle_hours
),

limit_cancels as (
    select j.k, t.idle_hours,
           j.start_ts + to_seconds(getvariable('max_interactive_s')::double) as cancel_ts
    from job_keys as j
    join windows as w using (k)
    cross join thresholds as t
    where j.interactive
      and getvariable('max_interactive_s') is not null
      and j.start_ts + to_seconds(getvariable('max_interactive_s')::double) < w.end_ts
),

cancels as (
    select
        k, idle_hours,
        least(i.cancel_ts, l.cancel_ts) as cancel_ts,
        case when i.cancel_ts is not null and (l.cancel_ts is null or i.cancel_ts <= l.cancel_ts)
             then case when jk.counted_idle then 'looks busy (counted idle)' else 'idle' end
             else 'time limit' end as reason
    from idle_cancels as i
    full join limit_cancels as l using (k, idle_hours)
    join job_keys as jk using (k)
),

gpu_after as (
    select
        c.k, c.idle_hours, g.attempt, g.host, g.gpu, g.missing_s,
        epoch(g.end_ts - greatest(g.start_ts, c.cancel_ts)) as after_s
    from cancels as c
    join gpus as g using (k)
    where g.end_ts > c.cancel_ts
),

idle_after as (
    select
        c.k, c.idle_hours, i.attempt, i.host, i.gpu,
        sum(epoch(i.end_ts - greatest(i.start_ts, c.cancel_ts))) as idle_s
    from cancels as c
    join idle as i using (k)
    where i.end_ts > c.cancel_ts
    group by c.k, c.idle_hours, i.attempt, i.host, i.gpu
),

per_gpu as (
    select
        a.k, a.idle_hours, a.after_s,
        greatest(0, a.after_s - coalesce(i.idle_s, 0)) as not_idle_s,
        greatest(0, a.after_s - coalesce(i.idle_s, 0) - a.missing_s) as work_s
    from gpu_after as a
    left join idle_after as i using (k, idle_hours, attempt, host, gpu)
),

per_job as (
    select
        k, idle_hours,
        sum(after_s) as after_s,
        sum(work_s) as work_s,
        sum(not_idle_s) as not_idle_s
    from per_gpu
    group by k, idle_hours
),

final as (
    select
        j.cluster,
        c.idle_hours,
        j.job_id,
        c.cancel_ts,
        c.reason,
        round(coalesce(p.after_s, 0), 3) as reclaimed_s,
        round(coalesce(p.work_s, 0), 3) as work_lost_s,
        round(coalesce(p.not_idle_s, 0), 3) as work_lost_max_s,
        round(coalesce(p.work_s, 0), 3) > 0 as wrongful
    from cancels as c
    join job_keys as j using (k)
    left join per_job as p using (k, idle_hours)
)

select * from final
