-- grain: one row per VC (and '(all)') x GPU model (and '(all)') (job_gpu_usage.gpu_model, '(unknown)' where no
--        source names it): jobs, GPU hours allocated, busy, in idle slots, on never-used GPUs,
--        lost (idle-slot + never-used), share lost %, GPU utilization (time-weighted mean) %,
--        and with [cost] prices the money they cost and the money lost.
-- sources: job_gpu_usage, job_usage.
-- variables: cluster, all_vcs, all_models.
-- GPU hours are slice-weighted (docs/definitions.md#mig-instances); a job on two models counts
-- in both, each with its own GPUs' hours.
-- The rows of VC / model '(all)' are the groups of `cube(vc, gpu_model)` that roll a column
-- up, labelled with the variables all_vcs and all_models (ROLLUP_LABELS in
-- gpuwaste/warehouse/results.py, set by whatever runs the summaries).
with

gpus as (
    select
        coalesce(j.vc, '(none)') as vc,
        coalesce(g.gpu_model, '(unknown)') as gpu_model,
        g.job_id, g.alloc_s, g.busy_s, g.idle_slot_s, g.never_used_s, g.observed_s,
        g.gpu_cost, g.lost_cost,
        coalesce(g.util_mean, 0) * g.observed_s as util_x_s
    from job_gpu_usage as g
    join job_usage as j on j.cluster = g.cluster and j.job_id = g.job_id
    where g.cluster = getvariable('cluster')
),

final as (
    select
        if(grouping(vc) = 1, getvariable('all_vcs'), vc) as vc,
        if(grouping(gpu_model) = 1, getvariable('all_models'), gpu_model) as gpu_model,
        count(distinct job_id) as jobs,
        sum(alloc_s) / 3600 as gpu_h,
        sum(busy_s) / 3600 as busy_gpu_h,
        sum(idle_slot_s) / 3600 as idle_slot_gpu_h,
        sum(never_used_s) / 3600 as never_used_gpu_h,
        sum(idle_slot_s + never_used_s) / 3600 as lost_gpu_h,
        100 * sum(idle_slot_s + never_used_s) / nullif(sum(alloc_s), 0) as lost_pct,
        sum(util_x_s) / nullif(sum(observed_s), 0) as gpu_util_pct,
        sum(gpu_cost) as cost,
        sum(lost_cost) as lost_cost
    from gpus
    group by cube(vc, gpu_model)
)

select * from final
