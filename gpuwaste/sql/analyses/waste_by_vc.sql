-- grain: one row per VC (and '(all)') x GPU model (and '(all)') x kind (debugging | inferred_debugging | non-debugging |
--        total) [CloudBrain §IV-C, Table IV].
-- sources: job_usage.
-- variables: cluster, all_vcs, all_models.
-- Idle-slot and never-used GPU time as a percent (a) of the GPU time of the jobs of that kind
-- ("among its own job") and (b) of the GPU time of all jobs of the VC ("among all the jobs").
-- Declared debugging jobs and inferred ones are kept apart.
-- The job's GPU model is job_usage.gpu_model (docs/analyses.md#split-by-gpu-model); the rows of
-- model '(all)' are every model together.
-- The rows of VC / model '(all)' are the groups of `cube(vc, gpu_model)` that roll a column
-- up, labelled with the variables all_vcs and all_models (ROLLUP_LABELS in
-- gpuwaste/warehouse/results.py, set by whatever runs the summaries).
with

jobs as (
    select coalesce(vc, '(none)') as vc, gpu_model, is_debug_declared, is_debug_inferred,
           gpu_s, idle_slot_gpu_s, never_used_gpu_s
    from job_usage
    where cluster = getvariable('cluster')
),

kinds as (
    select *,
        case
            when is_debug_declared then 'debugging'
            when is_debug_inferred then 'inferred_debugging'
            else 'non-debugging'
        end as kind
    from jobs
    union all
    select *, 'total' as kind from jobs
),

per_kind as (
    select
        if(grouping(vc) = 1, getvariable('all_vcs'), vc) as vc,
        if(grouping(gpu_model) = 1, getvariable('all_models'), gpu_model) as gpu_model,
        kind, count(*) as jobs, sum(gpu_s) as gpu_s,
        sum(idle_slot_gpu_s) as idle_slot_gpu_s, sum(never_used_gpu_s) as never_used_gpu_s
    from kinds
    group by kind, cube(vc, gpu_model)
),

vc_totals as (
    select
        if(grouping(vc) = 1, getvariable('all_vcs'), vc) as vc,
        if(grouping(gpu_model) = 1, getvariable('all_models'), gpu_model) as gpu_model,
        sum(gpu_s) as vc_gpu_s
    from jobs
    group by cube(vc, gpu_model)
),

final as (
    select
        k.vc, k.gpu_model, k.kind, k.jobs, k.gpu_s, k.idle_slot_gpu_s, k.never_used_gpu_s,
        100 * k.idle_slot_gpu_s / nullif(k.gpu_s, 0) as idle_slot_pct_own,
        100 * k.never_used_gpu_s / nullif(k.gpu_s, 0) as never_used_pct_own,
        100 * k.idle_slot_gpu_s / nullif(t.vc_gpu_s, 0) as idle_slot_pct_all,
        100 * k.never_used_gpu_s / nullif(t.vc_gpu_s, 0) as never_used_pct_all
    from per_kind as k
    join vc_totals as t using (vc, gpu_model)
)

select * from final
