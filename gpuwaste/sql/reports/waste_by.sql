-- grain: one row per cluster x user (waste_by = 'user'), x VC ('vc') or x GPU model ('model':
--        the device's gpu_model, '(unknown)' where no source names it) with GPU time in the
--        period [period_start, period_end): GPU hours allocated, busy, in idle slots, on
--        never-used GPUs, lost, share lost %, GPU utilization %, jobs; money allocated and lost
--        ([cost]); energy and energy lost, null where no GPU of the group has power
--        (docs/definitions.md#energy). Per user and VC, `report --by` adds the waits behind
--        the group's idle GPUs from sql/reports/waited_by.sql (same variables).
-- sources: job_gpu_usage, job_usage.
-- variables: waste_by ('user' | 'vc' | 'model'), cluster (null: every cluster), vc (null: every VC),
--            period_start, period_end (timestamptz; null: all time).
-- Period rule: a job is in the period when one of its GPU allocations overlaps it (a running
-- job's allocation reaches the watermark it was analyzed up to); each allocation counts with the
-- part of its figures inside the period, in proportion to its overlap (as waste_daily splits
-- days: exact for allocated hours, the others assumed spread evenly).
with

jobs as (
    select
        cluster,
        job_id,
        coalesce(case getvariable('waste_by') when 'user' then "user" else vc end, '(none)') as who
    from job_usage
    where (getvariable('cluster') is null or cluster = getvariable('cluster'))
      and (getvariable('vc') is null or coalesce(vc, '(none)') = getvariable('vc'))
),

gpus as (
    select
        cluster, job_id, gpu_model, alloc_s, busy_s, idle_slot_s, never_used_s, observed_s,
        gpu_cost, lost_cost, energy_kwh, lost_energy_kwh, idle_held_s, held_idle_energy_kwh,
        coalesce(util_mean, 0) * observed_s as util_x_s,
        epoch(
            least(end_ts, coalesce(getvariable('period_end')::timestamptz, end_ts))
            - greatest(start_ts, coalesce(getvariable('period_start')::timestamptz, start_ts))
        ) / epoch(end_ts - start_ts) as share
    from job_gpu_usage
    where alloc_s > 0
      and (getvariable('cluster') is null or cluster = getvariable('cluster'))
      and (getvariable('period_start') is null or end_ts > getvariable('period_start')::timestamptz)
      and (getvariable('period_end') is null or start_ts < getvariable('period_end')::timestamptz)
),

final as (
    select
        j.cluster,
        case getvariable('waste_by')
            when 'model' then coalesce(g.gpu_model, '(unknown)')
            else j.who
        end as who,
        count(distinct j.job_id) as jobs,
        sum(g.share * g.alloc_s) / 3600 as gpu_h,
        sum(g.share * g.busy_s) / 3600 as busy_gpu_h,
        sum(g.share * g.idle_slot_s) / 3600 as idle_slot_gpu_h,
        sum(g.share * g.never_used_s) / 3600 as never_used_gpu_h,
        sum(g.share * (g.idle_slot_s + g.never_used_s)) / 3600 as lost_gpu_h,
        100 * sum(g.share * (g.idle_slot_s + g.never_used_s)) / nullif(sum(g.share * g.alloc_s), 0)
            as lost_pct,
        sum(g.share * g.util_x_s) / nullif(sum(g.share * g.observed_s), 0) as gpu_util_pct,
        sum(g.share * g.gpu_cost) as cost,
        sum(g.share * g.lost_cost) as lost_cost,
        sum(g.share * g.energy_kwh) as energy_kwh,
        sum(g.share * g.lost_energy_kwh) as lost_energy_kwh,
        -- held idle (#44, docs/definitions.md#idle): memory held, no kernel; not in lost_*
        sum(g.share * g.idle_held_s) / 3600 as idle_held_gpu_h,
        sum(g.share * g.held_idle_energy_kwh) as held_idle_energy_kwh
    from gpus as g
    join jobs as j using (cluster, job_id)
    group by all
)

select * from final
