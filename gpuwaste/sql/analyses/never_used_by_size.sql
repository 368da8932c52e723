-- grain: one row per VC (and '(all)') x GPU model (and '(all)') x GPUs requested (1, 2, 4, 8, 16, other, all)
--        [CloudBrain §IV-C, Table V]: jobs with at least one never-used GPU.
-- sources: job_usage.
-- variables: cluster, all_vcs, all_models.
-- The job's GPU model is job_usage.gpu_model (docs/analyses.md#split-by-gpu-model); the rows of
-- model '(all)' are every model together.
-- The rows of VC / model '(all)' are the groups of `cube(vc, gpu_model)` that roll a column
-- up, labelled with the variables all_vcs and all_models (ROLLUP_LABELS in
-- gpuwaste/warehouse/results.py, set by whatever runs the summaries).
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

with_sizes as (
    select * from jobs
    union all
    select * replace ('all' as gpus_requested) from jobs
),

final as (
    select
        if(grouping(vc) = 1, getvariable('all_vcs'), vc) as vc,
        if(grouping(gpu_model) = 1, getvariable('all_models'), gpu_model) as gpu_model,
        gpus_requested,
        count(*) as jobs,
        count(*) filter (where has_never_used) as jobs_with_never_used,
        100.0 * count(*) filter (where has_never_used) / count(*) as share_pct
    from with_sizes
    group by gpus_requested, cube(vc, gpu_model)
)

select * from final
