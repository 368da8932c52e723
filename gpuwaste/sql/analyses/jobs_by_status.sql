-- grain: one row per VC (and '(all)') x GPU model (and '(all)') x final status (passed | killed | unsuccessful |
--        running) [Philly §4, Table 6]: jobs and GPU time, each also as a percent of the VC's.
-- sources: job_usage.
-- variables: cluster, all_vcs, all_models.
-- The job's GPU model is job_usage.gpu_model (docs/analyses.md#split-by-gpu-model); the rows of
-- model '(all)' are every model together.
-- The rows of VC / model '(all)' are the groups of `cube(vc, gpu_model)` that roll a column
-- up, labelled with the variables all_vcs and all_models (ROLLUP_LABELS in
-- gpuwaste/warehouse/results.py, set by whatever runs the summaries).
with

jobs as (
    select coalesce(vc, '(none)') as vc, gpu_model, state, gpu_s
    from job_usage
    where cluster = getvariable('cluster')
),

per_state as (
    select
        if(grouping(vc) = 1, getvariable('all_vcs'), vc) as vc,
        if(grouping(gpu_model) = 1, getvariable('all_models'), gpu_model) as gpu_model,
        state, count(*) as jobs, sum(gpu_s) as gpu_s
    from jobs
    group by state, cube(vc, gpu_model)
),

final as (
    select vc, gpu_model, state, jobs,
        100.0 * jobs / sum(jobs) over (partition by vc, gpu_model) as jobs_pct,
        gpu_s,
        100.0 * gpu_s / nullif(sum(gpu_s) over (partition by vc, gpu_model), 0) as gpu_time_pct
    from per_state
)

select * from final
