-- grain: one row per waiting stretch (queue_causes with wait_s > 0) x holder (the user and VC
--        of jobs whose allocated GPUs were idle while it waited): the holder's idle GPU-seconds
--        inside the stretch (idle slots and never-used GPUs, slice-weighted), and of them the
--        GPU-seconds that kept it waiting (blocked_gpu_s). docs/definitions.md#waiting-behind-idle-gpus.
-- sources: queue_causes, idle_slots, job_gpu_usage, job_usage.
-- variables: cluster.
-- blocked_gpu_s: at each moment a holder's idle GPUs can serve at most as many GPUs as other
-- users' jobs wait for, so the holder's total is the integral over time of
-- least(its idle GPUs, the GPUs other users' jobs wait for); it is shared among the stretches
-- in proportion to least(idle_gpu_s, gpus x wait_s), each stretch's own bound. A user's own
-- waits behind their own idle GPUs (same_user) keep that bound.
with

waits as (
    select job_id, attempt, "user", vc, gpus, wait_start, wait_end, wait_s
    from queue_causes
    where cluster = getvariable('cluster') and wait_s > 0
),

devices as (
    select job_id, attempt, host, gpu, gpu_instance, start_ts, end_ts, never_used,
        coalesce(gpu_weight, 1.0) as w,
        -- a never-used GPU's idle time is its observed time (never_used_s), taken as spread
        -- evenly over its allocation
        coalesce(gpu_weight, 1.0) * never_used_s / nullif(alloc_s, 0) as w_never
    from job_gpu_usage
    where cluster = getvariable('cluster')
),

idle as (
    select i.job_id, i.start_ts, i.end_ts, d.w
    from idle_slots as i
    join devices as d
        on d.job_id = i.job_id and d.attempt = i.attempt and d.host = i.host
        and d.gpu = i.gpu and d.gpu_instance is not distinct from i.gpu_instance
    where i.cluster = getvariable('cluster')
    union all
    select job_id, start_ts, end_ts, w_never
    from devices
    where never_used and end_ts > start_ts and w_never > 0
),

held as (
    select i.*, j."user" as holder_user, coalesce(j.vc, '(none)') as holder_vc
    from idle as i
    join job_usage as j on j.cluster = getvariable('cluster') and j.job_id = i.job_id
),

pairs as (
    select
        w.job_id, w.attempt, w."user", w.vc, w.gpus, w.wait_start, w.wait_end, w.wait_s,
        h.holder_user, h.holder_vc,
        h.holder_vc = w.vc as same_vc,
        h.holder_user = w."user" as same_user,
        sum(h.w * epoch(least(h.end_ts, w.wait_end) - greatest(h.start_ts, w.wait_start)))
            as idle_gpu_s,
        least(idle_gpu_s, w.gpus * w.wait_s) as bound_gpu_s
    from waits as w
    join held as h
        on h.start_ts < w.wait_end and h.end_ts > w.wait_start and h.job_id <> w.job_id
    group by
        w.job_id, w.attempt, w."user", w.vc, w.gpus, w.wait_start, w.wait_end, w.wait_s,
        h.holder_user, h.holder_vc
),

-- the GPUs waited for, from each change on (every stretch), and per waiting user
demand_events as (
    select wait_start as ts, "user", gpus as d from waits
    union all
    select wait_end, "user", -gpus from waits
),

demand as (
    select ts, lead(ts, 1, 'infinity'::timestamptz) over (order by ts) as next_ts, gpus
    from (
        select ts, round(sum(sum(d)) over (order by ts), 6) as gpus from demand_events group by ts
    )
),

user_demand as (
    select "user", ts, round(sum(sum(d)) over (partition by "user" order by ts), 6) as gpus
    from demand_events
    group by "user", ts
),

-- each holder's idle GPUs, from each change on
idle_events as (
    select holder_user, start_ts as ts, w as d from held
    union all
    select holder_user, end_ts, -w from held
),

holder_idle as (
    select
        holder_user, ts,
        lead(ts, 1, 'infinity'::timestamptz) over (partition by holder_user order by ts) as next_ts,
        gpus
    from (
        select holder_user, ts, round(sum(sum(d)) over (partition by holder_user order by ts), 6)
            as gpus
        from idle_events
        group by holder_user, ts
    )
),

pieces as (
    select
        i.holder_user, greatest(i.ts, d.ts) as p0, least(i.next_ts, d.next_ts) as p1,
        i.gpus as idle, d.gpus as waited
    from holder_idle as i
    join demand as d on d.ts < i.next_ts and d.next_ts > i.ts
    where i.gpus > 0 and d.gpus > 0
),

holder_total as (
    select p.holder_user, sum(epoch(p.p1 - p.p0) * least(p.idle, p.waited - coalesce(u.gpus, 0)))
        as blocked_gpu_s
    from pieces as p
    asof left join user_demand as u on u."user" = p.holder_user and u.ts <= p.p0
    where p.waited - coalesce(u.gpus, 0) > 0
    group by p.holder_user
),

final as (
    select
        p.* exclude (bound_gpu_s),
        if(
            p.same_user,
            p.bound_gpu_s,
            coalesce(
                t.blocked_gpu_s * p.bound_gpu_s
                / nullif(
                    sum(if(p.same_user, 0, p.bound_gpu_s)) over (partition by p.holder_user), 0
                ),
                0
            )
        ) as blocked_gpu_s
    from pairs as p
    left join holder_total as t using (holder_user)
)

select * from final
