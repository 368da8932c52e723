-- grain: one row per VC (and '(all)') x GPU model (and '(all)') x GPUs requested (1, 2, 4, 8, 16, other, all)
--        [CloudBrain §IV-C, Table V]: jobs with at least one never-used GPU.
-- sources: job_usage.
-- variables: cluster.
-- The job's GPU model is job_usage.gpu_model (docs/analyses.md#split-by-gpu-model); the rows of
-- model '(all)' are every model together.
with

jobs as (
    select
        coalesce(vc, '(none)') as vc,
        gpu_model,
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

with_models as (
    select * from with_all
    union all
    select * replace ('(all)' as gpu_model) from with_all
),

with_sizes as (
    select * from with_models
    union all
    select * replace ('all' as gpus_requested) from with_models
),

final as (
    select
        vc, gpu_model, gpus_requested,
        count(*) as jobs,
        count(*) filter (where has_never_used) as jobs_with_never_used,
        100.0 * count(*) filter (where has_never_used) / count(*) as share_pct
    from with_sizes
    group by vc, gpu_model, gpus_requested
)

select * from final
