-- grain: one row per VC of the holder (and '(all)'), GPU model '(all)': the waiting stretches of
--        other users' jobs that idle GPUs kept waiting, and the GPU hours they waited behind
--        them (docs/definitions.md#waiting-behind-idle-gpus).
-- sources: queue_idle_overlap.
-- variables: cluster, all_vcs, all_models.
-- A stretch waits behind every holder of idle GPUs (one row each): its VC's row counts it once
-- per VC, the '(all)' row once (so the VCs' waits do not add up to it). Other users' waits only
-- (not same_user), as the dashboard shows them. queue_idle_overlap has no GPU model of the
-- holder: no model split. The '(all)' row is there even when nothing waited (0 waits, 0 hours).
-- The dashboard's Overview reads it instead of counting the distinct stretches of every row.
with

waits as (
    select holder_vc as vc, job_id, attempt, blocked_gpu_s
    from queue_idle_overlap
    where cluster = getvariable('cluster') and not same_user
),

final as (
    select
        if(grouping(vc) = 1, getvariable('all_vcs'), vc) as vc,
        getvariable('all_models') as gpu_model,
        count(distinct (job_id, attempt)) filter (where blocked_gpu_s > 0) as blocked_waits,
        coalesce(sum(blocked_gpu_s), 0) / 3600 as blocked_wait_gpu_h
    from waits
    group by grouping sets ((vc), ())
)

select * from final
