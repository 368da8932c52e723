-- grain: one row per VC (and '(all)') x final status (passed | killed | unsuccessful |
--        running) [Philly §4, Table 6]: jobs and GPU time, each also as a percent of the VC's.
-- sources: job_usage.
-- variables: cluster.
with

jobs as (
    select coalesce(vc, '(none)') as vc, state, gpu_s
    from job_usage
    where cluster = getvariable('cluster')
),

expanded as (
    select * from jobs
    union all select * replace ('(all)' as vc) from jobs
),

per_state as (
    select vc, state, count(*) as jobs, sum(gpu_s) as gpu_s from expanded group by vc, state
),

final as (
    select vc, state, jobs,
        100.0 * jobs / sum(jobs) over (partition by vc) as jobs_pct,
        gpu_s,
        100.0 * gpu_s / nullif(sum(gpu_s) over (partition by vc), 0) as gpu_time_pct
    from per_state
)

select * from final
