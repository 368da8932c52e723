-- grain: one row per VC (and '(all)') x GPU model (and '(all)') x kind (declared | inferred | any) [CloudBrain §IV-C1]:
--        debugging jobs, the share reaching the time limit, and the share whose GPUs are unused
--        (idle slots or never used) for at least debug_unused_share of their GPU time.
-- sources: job_usage.
-- variables: cluster, all_vcs, all_models, debug_unused_share.
-- The job's GPU model is job_usage.gpu_model (docs/analyses.md#split-by-gpu-model); the rows of
-- model '(all)' are every model together.
-- The rows of VC / model '(all)' are the groups of `cube(vc, gpu_model)` that roll a column
-- up, labelled with the variables all_vcs and all_models (ROLLUP_LABELS in
-- gpuwaste/warehouse/results.py, set by whatever runs the summaries).
with

jobs as (
    select coalesce(vc, '(none)') as vc, gpu_model, is_debug_declared, is_debug_inferred, gpu_s,
           hit_time_limit, idle_share, idle_slot_gpu_s + never_used_gpu_s as idle_gpu_s
    from job_usage
    where cluster = getvariable('cluster') and is_debug
),

kinds as (
    select *, 'declared' as kind from jobs where is_debug_declared
    union all
    select *, 'inferred' as kind from jobs where is_debug_inferred
    union all
    select *, 'any' as kind from jobs
),

final as (
    select
        if(grouping(vc) = 1, getvariable('all_vcs'), vc) as vc,
        if(grouping(gpu_model) = 1, getvariable('all_models'), gpu_model) as gpu_model,
        kind,
        count(*) as jobs,
        sum(gpu_s) as gpu_s,
        100.0 * avg(case when hit_time_limit then 1 else 0 end) as hit_time_limit_pct,
        100.0 * avg(case when idle_share >= getvariable('debug_unused_share') then 1 else 0 end)
            as idle_ge_threshold_pct,
        sum(idle_gpu_s) as idle_gpu_s
    from kinds
    group by kind, cube(vc, gpu_model)
)

select * from final
