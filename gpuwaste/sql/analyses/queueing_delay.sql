-- grain: one row per VC (and '(all)') x GPU model (and '(all)') x size class (1, 2-4, 5-8, >8, all) [Philly §3]: delay
--        from submission to the start of the first attempt, mean and percentiles (seconds).
-- sources: job_usage.
-- variables: cluster, all_vcs, all_models.
-- The job's GPU model is job_usage.gpu_model (docs/analyses.md#split-by-gpu-model); the rows of
-- model '(all)' are every model together.
-- The rows of VC / model '(all)' are the groups of `cube(vc, gpu_model)` that roll a column
-- up, labelled with the variables all_vcs and all_models (ROLLUP_LABELS in
-- gpuwaste/warehouse/results.py, set by whatever runs the summaries).
with

jobs as (
    select coalesce(vc, '(none)') as vc, gpu_model, size_class, queue_delay_s
    from job_usage
    where cluster = getvariable('cluster') and queue_delay_s is not null
),

sized as (
    select * from jobs
    union all select * replace ('all' as size_class) from jobs
),

final as (
    select
        if(grouping(vc) = 1, getvariable('all_vcs'), vc) as vc,
        if(grouping(gpu_model) = 1, getvariable('all_models'), gpu_model) as gpu_model,
        size_class, count(*) as jobs,
        avg(queue_delay_s) as delay_mean_s,
        quantile_cont(queue_delay_s, 0.5) as delay_p50_s,
        quantile_cont(queue_delay_s, 0.9) as delay_p90_s,
        quantile_cont(queue_delay_s, 0.99) as delay_p99_s
    from sized
    group by size_class, cube(vc, gpu_model)
)

select * from final
