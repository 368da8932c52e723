-- grain: one row per VC (and '(all)') x GPU model (and '(all)') x job size (1, 4, 8, 16, all) x final status (and 'all')
--        [Philly §3, Table 3]: mean GPU utilization, weighted by observed GPU-minutes.
-- sources: job_gpu_usage, job_usage.
-- variables: cluster.
-- The job's GPU model is job_usage.gpu_model (docs/analyses.md#split-by-gpu-model); the rows of
-- model '(all)' are every model together.
with

gpus as (
    select job_id, sum(util_mean * observed_s) as util_x_s, sum(observed_s) as observed_s
    from job_gpu_usage
    where cluster = getvariable('cluster') and observed_s > 0
    group by job_id
),

jobs as (
    select coalesce(j.vc, '(none)') as vc, j.gpu_model, cast(j.gpus as varchar) as size, j.state,
           g.util_x_s, g.observed_s
    from job_usage as j
    join gpus as g using (job_id)
    where j.cluster = getvariable('cluster') and j.gpus in (1, 4, 8, 16)
    union all
    select coalesce(j.vc, '(none)') as vc, j.gpu_model, 'all' as size, j.state, g.util_x_s, g.observed_s
    from job_usage as j
    join gpus as g using (job_id)
    where j.cluster = getvariable('cluster')
),

expanded as (
    select * from jobs
    union all select * replace ('(all)' as vc) from jobs
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
    select vc, gpu_model, size, state, count(*) as jobs, sum(observed_s) / 60 as gpu_minutes,
           sum(util_x_s) / nullif(sum(observed_s), 0) as util_mean
    from states
    group by vc, gpu_model, size, state
)

select * from final
