-- grain: one row per job x attempt x allocated GPU of the cluster (job_gpu_usage, alloc_s > 0)
--        x UTC day its allocation overlaps: the GPU's figures, its job's VC, GPU model, debug
--        flag and state, the day's start, and the allocation's share of wall time in that day.
-- sources: job_gpu_usage, job_usage.
-- variables: cluster.
-- The one split of allocations into UTC days, read by the daily summaries (waste_daily.sql,
-- energy_daily.sql): the analyses make it the temp view `allocation_days` before they run
-- (`Analysis.staging` in gpuwaste/analyses/registry.py); `gpuwaste analyze` makes it once, a
-- temp table that both read (`registry.STAGING_TABLES`). A day's share is the allocation's
-- overlap with the day / its wall time: exact for the allocated GPU seconds (alloc_s, weighted
-- by a MIG slice), an even spread for the other figures. The job's GPU model is
-- job_usage.gpu_model (docs/analyses.md#split-by-gpu-model).
with

gpus as (
    select
        g.start_ts, g.end_ts, g.alloc_s, g.busy_s, g.idle_slot_s, g.never_used_s, g.missing_s,
        g.observed_s, g.util_mean, g.energy_kwh, g.lost_energy_kwh,
        coalesce(j.vc, '(none)') as vc, j.gpu_model, j.is_debug, j.state
    from job_gpu_usage as g
    join job_usage as j on j.cluster = g.cluster and j.job_id = g.job_id
    where g.cluster = getvariable('cluster') and g.alloc_s > 0
),

days as (
    select
        *,
        unnest(
            generate_series(
                date_trunc('day', start_ts), end_ts - interval 1 microsecond, interval 1 day
            )
        ) as day_start
    from gpus
),

final as (
    select
        *,
        epoch(least(end_ts, day_start + interval 1 day) - greatest(start_ts, day_start))
            / epoch(end_ts - start_ts) as share
    from days
)

select * from final
