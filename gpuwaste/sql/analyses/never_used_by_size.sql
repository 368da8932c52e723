-- grain: one row per VC (and '(all)') x GPUs requested (1, 2, 4, 8, 16, other, all)
--        [CloudBrain §IV-C, Table V]: jobs with at least one never-used GPU.
-- sources: job_usage.
-- variables: cluster.
with

jobs as (
    select
        coalesce(vc, '(none)') as vc,
        case when gpus in (1, 2, 4, 8, 16) then cast(gpus as varchar) else 'other' end
            as gpus_requested,
        never_used_gpus > 0 as has_never_used
    from job_usage
    where cluster = getvariable('cluster') and gpu_s > 0
),

with_all as (
    select * from jobs
    union all
    select * replace ('(all)' as vc) from jobs
),

with_sizes as (
    select * from with_all
    union all
    select * replace ('all' as gpus_requested) from with_all
),

final as (
    select
        vc, gpus_requested,
        count(*) as jobs,
        count(*) filter (where has_never_used) as jobs_with_never_used,
        100.0 * count(*) filter (where has_never_used) / count(*) as share_pct
    from with_sizes
    group by vc, gpus_requested
)

select * from final
