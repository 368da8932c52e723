-- grain: one row per VC (and '(all)') x GPU model (and '(all)') x metric [CloudBrain §IV-A, §IV-B].
-- sources: job_usage.
-- variables: cluster, all_vcs, all_models, low_share_pct, very_low_pct, mismatch_high_pct, mismatch_low_pct.
-- 'mean_*' / 'mean_max_*' are the mean over jobs of each job's mean / maximum (percent); every
-- other metric is a percent of jobs. Jobs flagged low_data are left out (not judged).
-- The job's GPU model is job_usage.gpu_model (docs/analyses.md#split-by-gpu-model); the rows of
-- model '(all)' are every model together.
-- The rows of VC / model '(all)' are the groups of `cube(vc, gpu_model)` that roll a column
-- up, labelled with the variables all_vcs and all_models (ROLLUP_LABELS in
-- gpuwaste/warehouse/results.py, set by whatever runs the summaries).
with

jobs as (
    select coalesce(vc, '(none)') as vc, *  exclude (vc)
    from job_usage
    where cluster = getvariable('cluster') and not low_data
),

per_vc as (
    select
        if(grouping(vc) = 1, getvariable('all_vcs'), vc) as vc,
        if(grouping(gpu_model) = 1, getvariable('all_models'), gpu_model) as gpu_model,
        count(*) as jobs,
        avg(util_mean) as mean_gpu_util,
        avg(mem_util_mean) as mean_gpu_mem_util,
        avg(cpu_util_mean) as mean_cpu_util,
        avg(host_mem_util_mean) as mean_host_mem_util,
        avg(util_max) as mean_max_gpu_util,
        avg(mem_util_max) as mean_max_gpu_mem_util,
        avg(cpu_util_max) as mean_max_cpu_util,
        avg(host_mem_util_max) as mean_max_host_mem_util,
        100.0 * avg(case when util_mean < getvariable('low_share_pct')
                          and mem_util_mean < getvariable('low_share_pct') then 1 else 0 end)
            as pct_gpu_and_mem_under_low,
        100.0 * avg(case when util_mean <= getvariable('very_low_pct')
                          and mem_util_mean <= getvariable('very_low_pct') then 1 else 0 end)
            as pct_gpu_and_mem_at_most_very_low,
        100.0 * avg(case when util_mean < getvariable('very_low_pct')
                          and cpu_util_mean < getvariable('very_low_pct') then 1 else 0 end)
            as pct_gpu_and_cpu_under_very_low,
        100.0 * avg(case when util_mean > getvariable('mismatch_high_pct')
                          and cpu_util_mean < getvariable('mismatch_low_pct') then 1 else 0 end)
            as pct_mismatch_gpu_high_cpu_low,
        100.0 * avg(case when cpu_util_mean > getvariable('mismatch_high_pct')
                          and util_mean < getvariable('mismatch_low_pct') then 1 else 0 end)
            as pct_mismatch_cpu_high_gpu_low,
        100.0 * avg(case when util_mean > getvariable('mismatch_high_pct')
                          and mem_util_mean < getvariable('mismatch_low_pct') then 1 else 0 end)
            as pct_mismatch_gpu_high_mem_low,
        100.0 * avg(case when mem_util_mean > getvariable('mismatch_high_pct')
                          and util_mean < getvariable('mismatch_low_pct') then 1 else 0 end)
            as pct_mismatch_mem_high_gpu_low,
        100.0 * avg(case when fluctuating then 1 else 0 end) as pct_fluctuating,
        100.0 * avg(case when n_stable_phases > 1 then 1 else 0 end)
            as pct_more_than_one_stable_phase,
        100.0 * avg(case when phase_level_spread_mib > 1024 then 1 else 0 end)
            as pct_phase_levels_differ_1gib,
        100.0 * avg(case when phase_level_spread_mib > 8192 then 1 else 0 end)
            as pct_phase_levels_differ_8gib
    from jobs
    group by cube(vc, gpu_model)
),

long as (
    unpivot per_vc on columns(* exclude (vc, gpu_model, jobs)) into name metric value value
),

final as (
    select vc, gpu_model, metric, value, jobs from long
)

select * from final
