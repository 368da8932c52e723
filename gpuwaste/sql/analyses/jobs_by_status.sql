-- grain: one row per VC (and '(all)') x GPU model (and '(all)') x final status (passed | killed | unsuccessful |
--        running) [Philly §4, Table 6]: jobs and GPU time, each also as a percent of the VC's.
-- sources: job_usage.
-- variables: cluster.
-- The job's GPU model is job_usage.gpu_model (docs/analyses.md#split-by-gpu-model); the rows of
-- model '(all)' are every model together.
with

jobs as (
    select coalesce(vc, '(none)') as vc, gpu_model, state, gpu_s
    from job_usage
    where cluster = getvariable('cluster')
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

per_state as (
    select vc, gpu_model, state, count(*) as jobs, sum(gpu_s) as gpu_s
    from with_models
    group by vc, gpu_model, state
),

final as (
    select vc, gpu_model, state, jobs,
        100.0 * jobs / sum(jobs) over (partition by vc, gpu_model) as jobs_pct,
        gpu_s,
        100.0 * gpu_s / nullif(sum(gpu_s) over (partition by vc, gpu_model), 0) as gpu_time_pct
    from per_state
)

select * from final
