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
--     Shield and OpenPAI judge); a job idle stretch is a maximal run of such time, in one pass of
--     +1/-1 events (allocations and idle intervals) summed in time order per job;
--   * the idle cancel point for threshold H is the earliest t >= start + grace with the job idle
--     over [t - H, t] (t at most the stretch's end, and before the job's end); an interactive
--     job is also cancelled at start + max_interactive_s; the earlier of the two wins;
--   * after the cancel point t, a GPU's time outside its idle intervals is busy or missing data:
--     work lost counts it minus the GPU's missing data (the busy time certainly after t);
--     work_lost_max_s counts it all (as if the missing data lay before t).
with

thresholds as (
    select unnest(getvariable('idle_hours')::double[]) as idle_hours
),

gpus as (
    select g.cluster, g.job_id, g.attempt, g.host, g.gpu, g.start_ts, g.end_ts, g.never_used,
           g.missing_s
    from job_gpu_usage as g
    semi join policy_jobs as j using (cluster, job_id)
    where g.alloc_s > 0
),

idle as (
    select s.cluster, s.job_id, s.attempt, s.host, s.gpu, s.start_ts, s.end_ts
    from idle_slots as s
    semi join policy_jobs as j using (cluster, job_id)
    union all
    select cluster, job_id, attempt, host, gpu, start_ts, end_ts
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
        cluster, job_id,
        count(*) - count(*) filter (where never_used) as used_gpus,
        min(start_ts) = max(start_ts) and min(end_ts) = max(end_ts) as one_window,
        min(start_ts) as alloc_from,
        max(end_ts) as end_ts
    from gpus
    group by cluster, job_id
),

long_slots as (
    select
        s.cluster, s.job_id,
        count(*) as slots,
        count(distinct (s.attempt, s.host, s.gpu)) as slot_gpus,
        max(s.start_ts) as idle_from,
        min(s.end_ts) as idle_to
    from idle_slots as s
    semi join policy_jobs as j using (cluster, job_id)
    where s.duration_s >= (select min(idle_hours) from thresholds) * 3600
    group by s.cluster, s.job_id
),

shapes as (
    select
        w.cluster, w.job_id, w.alloc_from, w.end_ts, w.one_window,
        l.idle_from, l.idle_to,
        w.one_window and coalesce(l.slots, 0) = w.used_gpus
            and coalesce(l.slot_gpus, 0) = w.used_gpus as simple,
        not w.one_window
            or (coalesce(l.slot_gpus, 0) = w.used_gpus and l.slots > w.used_gpus) as swept
    from windows as w
    left join long_slots as l using (cluster, job_id)
),

simple_stretches as (
    select
        cluster, job_id,
        greatest(coalesce(idle_from, alloc_from), alloc_from) as idle_from,
        least(coalesce(idle_to, end_ts), end_ts) as idle_to
    from shapes
    where simple
),

-- The general sweep: +1/-1 events of allocations and idle intervals, summed in time order per
-- job; the job is idle where every GPU it holds is idle.
changes as (
    select cluster, job_id, ts, sum(d_alloc) as d_alloc, sum(d_idle) as d_idle
    from (
        select cluster, job_id, start_ts as ts, 1 as d_alloc, 0 as d_idle from gpus
        union all
        select cluster, job_id, end_ts, -1, 0 from gpus
        union all
        select cluster, job_id, start_ts, 0, 1 from idle
        union all
        select cluster, job_id, end_ts, 0, -1 from idle
    )
    semi join (select cluster, job_id from shapes where swept) using (cluster, job_id)
    group by cluster, job_id, ts
),

segments as (
    select
        cluster, job_id, ts, next_ts,
        allocated > 0 and idle_gpus = allocated as all_idle
    from (
        select
            cluster, job_id, ts,
            sum(d_alloc) over w as allocated,
            sum(d_idle) over w as idle_gpus,
            lead(ts) over w as next_ts
        from changes
        window w as (partition by cluster, job_id order by ts rows unbounded preceding)
    )
    where next_ts is not null
),

swept_stretches as (
    select cluster, job_id, min(ts) as idle_from, max(next_ts) as idle_to
    from (
        select
            *,
            sum(case when all_idle then 0 else 1 end) over (
                partition by cluster, job_id order by ts rows unbounded preceding
            ) as run
        from segments
    )
    where all_idle
    group by cluster, job_id, run
),

stretches as (
    select * from simple_stretches
    union all
    select * from swept_stretches
),

idle_cancels as (
    select cluster, job_id, idle_hours, min(cancel_ts) as cancel_ts
    from (
        select
            s.cluster, s.job_id, t.idle_hours, s.idle_to, w.end_ts,
            greatest(
                s.idle_from + to_seconds(t.idle_hours * 3600),
                j.start_ts + to_seconds(getvariable('grace_s')::double)
            ) as cancel_ts
        from stretches as s
        join policy_jobs as j using (cluster, job_id)
        join windows as w using (cluster, job_id)
        join thresholds as t on epoch(s.idle_to - s.idle_from) >= t.idle_hours * 3600
    )
    where cancel_ts <= idle_to and cancel_ts < end_ts
    group by cluster, job_id, idle_hours
),

limit_cancels as (
    select j.cluster, j.job_id, t.idle_hours,
           j.start_ts + to_seconds(getvariable('max_interactive_s')::double) as cancel_ts
    from policy_jobs as j
    join windows as e using (cluster, job_id)
    cross join thresholds as t
    where j.interactive
      and getvariable('max_interactive_s') is not null
      and j.start_ts + to_seconds(getvariable('max_interactive_s')::double) < e.end_ts
),

cancels as (
    select
        cluster, job_id, idle_hours,
        least(i.cancel_ts, l.cancel_ts) as cancel_ts,
        case when i.cancel_ts is not null and (l.cancel_ts is null or i.cancel_ts <= l.cancel_ts)
             then 'idle' else 'time limit' end as reason
    from idle_cancels as i
    full join limit_cancels as l using (cluster, job_id, idle_hours)
),

gpu_after as (
    select
        c.cluster, c.job_id, c.idle_hours, g.attempt, g.host, g.gpu, g.missing_s,
        epoch(g.end_ts - greatest(g.start_ts, c.cancel_ts)) as after_s
    from cancels as c
    join gpus as g using (cluster, job_id)
    where g.end_ts > c.cancel_ts
),

idle_after as (
    select
        c.cluster, c.job_id, c.idle_hours, i.attempt, i.host, i.gpu,
        sum(epoch(i.end_ts - greatest(i.start_ts, c.cancel_ts))) as idle_s
    from cancels as c
    join idle as i using (cluster, job_id)
    where i.end_ts > c.cancel_ts
    group by all
),

per_gpu as (
    select
        a.cluster, a.job_id, a.idle_hours, a.after_s,
        greatest(0, a.after_s - coalesce(i.idle_s, 0)) as not_idle_s,
        greatest(0, a.after_s - coalesce(i.idle_s, 0) - a.missing_s) as work_s
    from gpu_after as a
    left join idle_after as i using (cluster, job_id, idle_hours, attempt, host, gpu)
)

select
    c.cluster,
    c.idle_hours,
    c.job_id,
    c.cancel_ts,
    c.reason,
    round(coalesce(sum(p.after_s), 0), 3) as reclaimed_s,
    round(coalesce(sum(p.work_s), 0), 3) as work_lost_s,
    round(coalesce(sum(p.not_idle_s), 0), 3) as work_lost_max_s,
    round(coalesce(sum(p.work_s), 0), 3) > 0 as wrongful
from cancels as c
left join per_gpu as p using (cluster, job_id, idle_hours)
group by c.cluster, c.idle_hours, c.job_id, c.cancel_ts, c.reason
