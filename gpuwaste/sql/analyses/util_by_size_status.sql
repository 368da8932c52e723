-- grain: one row per VC (and '(all)') x GPU model (and '(all)') x job size (1, 4, 8, 16, all) x final status (and 'all')
--        [Philly §3, Table 3]: mean GPU utilization, weighted by observed GPU-minutes.
-- sources: job_gpu_usage, job_usage.
-- variables: cluster, all_vcs, all_models.
-- The job's GPU model is job_usage.gpu_model (docs/analyses.md#split-by-gpu-model); the rows of
-- model '(all)' are every model together.
-- The rows of VC / model '(all)' are the groups of `cube(vc, gpu_model)` that roll a column
-- up, labelled with the variables all_vcs and all_models (ROLLUP_LABELS in
-- gpuwaste/warehouse/results.py, set by whatever runs the summaries).
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

states as (
    select * from jobs
    union all select * replace ('all' as state) from jobs
),

final as (
    select
        if(grouping(vc) = 1, getvariable('all_vcs'), vc) as vc,
        if(grouping(gpu_model) = 1, getvariable('all_models'), gpu_model) as gpu_model,
        size, state, count(*) as jobs, sum(observed_s) / 60 as gpu_minutes,
        sum(util_x_s) / nullif(sum(observed_s), 0) as util_mean
    from states
    group by size, state, cube(vc, gpu_model)
)

select * from final
