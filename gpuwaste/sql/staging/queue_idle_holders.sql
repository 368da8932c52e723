-- grain: one row per holder of idle GPUs (the user and VC of jobs whose allocated GPUs were idle:
--        idle slots and never-used GPUs, slice-weighted) x change of its idle GPUs: its number
--        (h), its names and their place in queue_idle_overlap's key (key_order), the idle GPUs
--        from the change on (gpus, until next_ts) and its idle GPU-seconds before it (before_s).
--        docs/definitions.md#waiting-behind-idle-gpus.
-- sources: idle_slots, job_gpu_usage, job_usage.
-- variables: cluster.
-- Read by staging/queue_span_idle.sql and analyses/queue_idle_overlap.sql; `gpuwaste analyze`
-- makes it a temp table before them (registry.STAGING_TABLES).
with

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

-- a holder without a user meets no stretch (no equality holds on a null user): left out
held_by as (
    select i.*, j."user" as holder_user, coalesce(j.vc, '(none)') as holder_vc
    from idle as i
    join job_usage as j on j.cluster = getvariable('cluster') and j.job_id = i.job_id
    where j."user" is not null
),

-- the holders numbered: h per user and VC; every join and window of the readers is on these
-- numbers, not on the names. Numbered by VC first: a VC's holders are one range of numbers,
-- which a fair-share piece names (queue_idle_overlap.sql's piece_spans); key_order is their
-- order in its table's key
holders as (
    select
        holder_user, holder_vc,
        row_number() over (order by holder_vc, holder_user) as h,
        row_number() over (order by holder_user, holder_vc) as key_order
    from (select distinct holder_user, holder_vc from held_by)
),

held as (
    select o.h, i.start_ts, i.end_ts, i.w
    from held_by as i
    join holders as o using (holder_user, holder_vc)
),

-- each holder's idle GPUs from each change on, and its idle GPU-seconds before: a stretch's
-- idle GPU-seconds of a holder are the difference of that integral at its two ends
holder_events as (
    select h, start_ts as ts, w as d from held
    union all
    select h, end_ts, -w from held
),

holder_segments as (
    select
        *,
        coalesce(
            sum(gpus * ((epoch_us(next_ts) - epoch_us(ts)) / 1e6)) over (
                partition by h order by ts rows between unbounded preceding and 1 preceding
            ),
            0
        ) as before_s
    from (
        select
            h, ts,
            lead(ts) over (partition by h order by ts) as next_ts,
            round(sum(sum(d)) over (partition by h order by ts), 6) as gpus
        from holder_events
        group by h, ts
    )
),

final as (
    select s.h, o.holder_user, o.holder_vc, o.key_order, s.ts, s.next_ts, s.gpus, s.before_s
    from holder_segments as s
    join holders as o using (h)
)

select * from final
