-- grain: one row per VC (and '(all)') x GPU model (and '(all)') x job size (1, 4, 8, 16, all) x final status (and 'all')
--        x 1-point utilization bucket [Philly §3, Figure 5]: GPU-minutes; cumulate for the CDF.
-- sources: job_util_hist, job_usage.
-- variables: cluster.
-- The job's GPU model is job_usage.gpu_model (docs/analyses.md#split-by-gpu-model); the rows of
-- model '(all)' are every model together.
with

minutes as (
    -- added up per (vc, model, size, state, bucket) first: the roll-ups below then copy a few
    -- thousand rows, not every job's
    select coalesce(j.vc, '(none)') as vc, j.gpu_model, cast(j.gpus as varchar) as size, j.state,
           h.bucket, sum(h.gpu_minutes) as gpu_minutes
    from job_util_hist as h
    join job_usage as j on j.job_id = h.job_id and j.cluster = h.cluster
    where h.cluster = getvariable('cluster')
    group by all
),

sized as (
    select * from minutes where size in ('1', '4', '8', '16')
    union all select * replace ('all' as size) from minutes
),

expanded as (
    select * from sized
    union all select * replace ('(all)' as vc) from sized
),

with_models as (
    select * from expanded
    union all
    select * replace ('(all)' as gpu_model) from expanded
),

states as (
    select * from with_models
    union all select * replace ('all' as state) from with_models
),

final as (
    select vc, gpu_model, size, state, bucket, sum(gpu_minutes) as gpu_minutes
    from states
    group by vc, gpu_model, size, state, bucket
)

select * from final
