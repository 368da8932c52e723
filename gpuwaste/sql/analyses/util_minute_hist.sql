-- grain: one row per VC (and '(all)') x GPU model (and '(all)') x job size (1, 4, 8, 16, all) x final status (and 'all')
--        x 1-point utilization bucket [Philly §3, Figure 5]: GPU-minutes; cumulate for the CDF.
-- sources: job_util_hist, job_usage.
-- variables: cluster, all_vcs, all_models.
-- The job's GPU model is job_usage.gpu_model (docs/analyses.md#split-by-gpu-model); the rows of
-- model '(all)' are every model together.
-- The rows of VC / model '(all)' are the groups of `cube(vc, gpu_model)` that roll a column
-- up, labelled with the variables all_vcs and all_models (ROLLUP_LABELS in
-- gpuwaste/warehouse/results.py, set by whatever runs the summaries).
with

minutes as (
    -- added up per (vc, model, size, state, bucket) first: the roll-ups below then read a few
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

states as (
    select * from sized
    union all select * replace ('all' as state) from sized
),

final as (
    select
        if(grouping(vc) = 1, getvariable('all_vcs'), vc) as vc,
        if(grouping(gpu_model) = 1, getvariable('all_models'), gpu_model) as gpu_model,
        size, state, bucket, sum(gpu_minutes) as gpu_minutes
    from states
    group by size, state, bucket, cube(vc, gpu_model)
)

select * from final
