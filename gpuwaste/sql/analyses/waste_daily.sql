-- grain: one row per VC (and '(all)') x GPU model (and '(all)') x UTC day: GPU hours
--        allocated, busy, in idle slots, never used, without data, observed, utilization-weighted, and the GPU hours of
--        debugging, failed and killed jobs. GPU utilization (time-weighted mean) over any days
--        and VCs = 100 * sum(util_gpu_h) / sum(observed_gpu_h).
-- sources: allocation_days (staging/allocation_days.sql: job_gpu_usage x job_usage, one row
--          per allocated GPU x UTC day, with the day's share of the allocation).
-- variables: cluster, all_vcs, all_models.
-- (alloc_s are GPU seconds, weighted by a MIG slice; the share is of wall time.)
-- An allocation's figures are split across the days it spans in proportion to its overlap with
-- each day (allocation_days: exact for allocated hours; a day's share of the others assumes
-- they spread evenly).
-- The job's GPU model is job_usage.gpu_model (docs/analyses.md#split-by-gpu-model); the rows of
-- model '(all)' are every model together.
-- The rows of VC / model '(all)' are the groups of `cube(vc, gpu_model)` that roll a column
-- up, labelled with the variables all_vcs and all_models (ROLLUP_LABELS in
-- gpuwaste/warehouse/results.py, set by whatever runs the summaries).
with

final as (
    select
        if(grouping(vc) = 1, getvariable('all_vcs'), vc) as vc,
        if(grouping(gpu_model) = 1, getvariable('all_models'), gpu_model) as gpu_model,
        cast(day_start as date) as day,
        sum(share * alloc_s) / 3600 as alloc_gpu_h,
        sum(share * busy_s) / 3600 as busy_gpu_h,
        sum(share * idle_slot_s) / 3600 as idle_slot_gpu_h,
        sum(share * never_used_s) / 3600 as never_used_gpu_h,
        sum(share * missing_s) / 3600 as missing_gpu_h,
        sum(share * observed_s) / 3600 as observed_gpu_h,
        sum(share * (coalesce(util_mean, 0) * observed_s / 100)) / 3600 as util_gpu_h,
        sum(share * alloc_s) filter (where is_debug) / 3600 as debug_gpu_h,
        sum(share * alloc_s) filter (where state = 'unsuccessful') / 3600 as failed_gpu_h,
        sum(share * alloc_s) filter (where state = 'killed') / 3600 as killed_gpu_h
    from allocation_days
    group by cast(day_start as date), cube(vc, gpu_model)
)

select * from final
