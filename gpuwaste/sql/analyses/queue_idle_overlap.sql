-- grain: one row per waiting stretch (queue_causes with wait_s > 0) x holder (the user and VC
--        of jobs whose allocated GPUs were idle while it waited): the holder's idle GPU-seconds
--        inside the stretch (idle slots and never-used GPUs, slice-weighted), and of them the
--        GPU-seconds that kept it waiting (blocked_gpu_s = the least of the idle GPU-seconds
--        and the stretch's own GPU-seconds, gpus x wait_s). docs/definitions.md#waiting-behind-idle-gpus.
-- sources: queue_causes, idle_slots, job_gpu_usage, job_usage.
-- variables: cluster.
with

waits as (
    select job_id, attempt, "user", vc, gpus, wait_start, wait_end, wait_s
    from queue_causes
    where cluster = getvariable('cluster') and wait_s > 0
),

devices as (
    select job_id, attempt, host, gpu, gpu_instance, start_ts, end_ts, never_used,
        coalesce(gpu_weight, 1.0) as w
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
    select job_id, start_ts, end_ts, w from devices where never_used and end_ts > start_ts
),

held as (
    select i.*, j."user" as holder_user, coalesce(j.vc, '(none)') as holder_vc
    from idle as i
    join job_usage as j on j.cluster = getvariable('cluster') and j.job_id = i.job_id
),

final as (
    select
        w.job_id, w.attempt, w."user", w.vc, w.gpus, w.wait_start, w.wait_end, w.wait_s,
        h.holder_user, h.holder_vc,
        h.holder_vc = w.vc as same_vc,
        h.holder_user = w."user" as same_user,
        sum(h.w * epoch(least(h.end_ts, w.wait_end) - greatest(h.start_ts, w.wait_start)))
            as idle_gpu_s,
        least(idle_gpu_s, w.gpus * w.wait_s) as blocked_gpu_s
    from waits as w
    join held as h
        on h.start_ts < w.wait_end and h.end_ts > w.wait_start and h.job_id <> w.job_id
    group by
        w.job_id, w.attempt, w."user", w.vc, w.gpus, w.wait_start, w.wait_end, w.wait_s,
        h.holder_user, h.holder_vc
)

select * from final
