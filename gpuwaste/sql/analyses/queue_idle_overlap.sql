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

-- each holder's idle GPUs from each change on, and its idle GPU-seconds before: a stretch's
-- idle GPU-seconds of a holder are the difference of that integral at its two ends
holder_events as (
    select holder_user, holder_vc, start_ts as ts, w as d from held
    union all
    select holder_user, holder_vc, end_ts, -w from held
),

holder_segments as (
    select
        *,
        coalesce(
            sum(gpus * epoch(next_ts - ts)) over (
                partition by holder_user, holder_vc order by ts
                rows between unbounded preceding and 1 preceding
            ),
            0
        ) as before_s
    from (
        select
            holder_user, holder_vc, ts,
            lead(ts) over (partition by holder_user, holder_vc order by ts) as next_ts,
            round(sum(sum(d)) over (partition by holder_user, holder_vc order by ts), 6) as gpus
        from holder_events
        group by holder_user, holder_vc, ts
    )
),

-- the holders that held idle GPUs in each UTC hour a stretch waited (candidates; the integral
-- says how much)
holder_hours as (
    select distinct holder_user, holder_vc, hour
    from (
        select
            holder_user, holder_vc,
            unnest(range(epoch(start_ts)::bigint // 3600, epoch(end_ts)::bigint // 3600 + 1))
                as hour
        from held
    )
),

candidates as (
    select distinct
        w.job_id, w.attempt, w."user", w.vc, w.gpus, w.wait_start, w.wait_end, w.wait_s,
        h.holder_user, h.holder_vc
    from (
        select
            *,
            unnest(
                range(epoch(wait_start)::bigint // 3600, epoch(wait_end)::bigint // 3600 + 1)
            ) as hour
        from waits
    ) as w
    join holder_hours as h using (hour)
),

pairs as (
    select * from (
    select
        c.*,
        c.holder_vc = c.vc as same_vc,
        c.holder_user = c."user" as same_user,
        round(
            coalesce(e1.before_s + e1.gpus * epoch(c.wait_end - e1.ts), 0)
            - coalesce(e0.before_s + e0.gpus * epoch(c.wait_start - e0.ts), 0),
            6
        ) as idle_gpu_s,
        least(idle_gpu_s, c.gpus * c.wait_s) as bound_gpu_s
    from candidates as c
    asof left join holder_segments as e0
        on e0.holder_user = c.holder_user and e0.holder_vc = c.holder_vc
        and e0.ts <= c.wait_start
    asof left join holder_segments as e1
        on e1.holder_user = c.holder_user and e1.holder_vc = c.holder_vc
        and e1.ts <= c.wait_end
    )
    where idle_gpu_s > 0
),

-- the GPUs waited for, from each change on (every stretch), and per waiting user
demand_events as (
    select wait_start as ts, "user", gpus as d from waits
    union all
    select wait_end, "user", -gpus from waits
),

demand as (
    select
        row_number() over (order by ts) as idx,
        ts, lead(ts, 1, 'infinity'::timestamptz) over (order by ts) as next_ts, gpus
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

-- a holder's segment meets the demand segments by number (from the one holding its start to
-- the one holding its end), not by an inequality join
pieces as (
    select
        i.holder_user, greatest(i.ts, d.ts) as p0, least(i.next_ts, d.next_ts) as p1,
        i.gpus as idle, d.gpus as waited
    from (
        select i.*, unnest(range(coalesce(d0.idx, 1), coalesce(d1.idx, 0) + 1)) as idx
        from holder_idle as i
        asof left join demand as d0 on d0.ts <= i.ts
        asof left join demand as d1 on d1.ts < i.next_ts
        where i.gpus > 0
    ) as i
    join demand as d using (idx)
    where d.gpus > 0 and d.ts < i.next_ts and d.next_ts > i.ts
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
