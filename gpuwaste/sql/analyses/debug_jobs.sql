-- grain: one row per VC (and '(all)') x GPU model (and '(all)') x kind (declared | inferred | any) [CloudBrain §IV-C1]:
--        debugging jobs, the share reaching the time limit, and the share whose GPUs are unused
--        (idle slots or never used) for at least debug_unused_share of their GPU time.
-- sources: job_usage.
-- variables: cluster, debug_unused_share.
-- The job's GPU model is job_usage.gpu_model (docs/analyses.md#split-by-gpu-model); the rows of
-- model '(all)' are every model together.
with

jobs as (
    select coalesce(vc, '(none)') as vc, gpu_model, is_debug_declared, is_debug_inferred, gpu_s,
           hit_time_limit, idle_share, idle_slot_gpu_s + never_used_gpu_s as idle_gpu_s
    from job_usage
    where cluster = getvariable('cluster') and is_debug
),

with_all as (
    select * from jobs
    union all
    select * replace ('(all)' as vc) from jobs
),

with_models as (
    select * from with_all
    union all
    select * replace ('(all)' as gpu_model) from with_all
),

kinds as (
    select *, 'declared' as kind from with_models where is_debug_declared
    union all
    select *, 'inferred' as kind from with_models where is_debug_inferred
    union all
    select *, 'any' as kind from with_models
),

final as (
    select
        vc, gpu_model, kind,
        count(*) as jobs,
        sum(gpu_s) as gpu_s,
        100.0 * avg(case when hit_time_limit then 1 else 0 end) as hit_time_limit_pct,
        100.0 * avg(case when idle_share >= getvariable('debug_unused_share') then 1 else 0 end)
            as idle_ge_threshold_pct,
        sum(idle_gpu_s) as idle_gpu_s
    from kinds
    group by vc, gpu_model, kind
)

select * from final
