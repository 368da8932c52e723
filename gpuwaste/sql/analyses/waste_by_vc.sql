-- grain: one row per VC (and '(all)') x kind (debugging | inferred_debugging | non-debugging |
--        total) [CloudBrain §IV-C, Table IV].
-- sources: job_usage.
-- variables: cluster.
-- Idle-slot and never-used GPU time as a percent (a) of the GPU time of the jobs of that kind
-- ("among its own job") and (b) of the GPU time of all jobs of the VC ("among all the jobs").
-- Declared debugging jobs and inferred ones are kept apart.
with

jobs as (
    select coalesce(vc, '(none)') as vc, is_debug_declared, is_debug_inferred,
           gpu_s, idle_slot_gpu_s, never_used_gpu_s
    from job_usage
    where cluster = getvariable('cluster')
),

with_all as (
    select * from jobs
    union all
    select * replace ('(all)' as vc) from jobs
),

kinds as (
    select *,
        case
            when is_debug_declared then 'debugging'
            when is_debug_inferred then 'inferred_debugging'
            else 'non-debugging'
        end as kind
    from with_all
    union all
    select *, 'total' as kind from with_all
),

per_kind as (
    select vc, kind, count(*) as jobs, sum(gpu_s) as gpu_s,
           sum(idle_slot_gpu_s) as idle_slot_gpu_s, sum(never_used_gpu_s) as never_used_gpu_s
    from kinds
    group by vc, kind
),

vc_totals as (
    select vc, sum(gpu_s) as vc_gpu_s from with_all group by vc
),

final as (
    select
        k.vc, k.kind, k.jobs, k.gpu_s, k.idle_slot_gpu_s, k.never_used_gpu_s,
        100 * k.idle_slot_gpu_s / nullif(k.gpu_s, 0) as idle_slot_pct_own,
        100 * k.never_used_gpu_s / nullif(k.gpu_s, 0) as never_used_pct_own,
        100 * k.idle_slot_gpu_s / nullif(t.vc_gpu_s, 0) as idle_slot_pct_all,
        100 * k.never_used_gpu_s / nullif(t.vc_gpu_s, 0) as never_used_pct_all
    from per_kind as k
    join vc_totals as t using (vc)
)

select * from final
