-- grain: one row per cluster x VC: the GPU seconds allocated, busy, in idle slots, on never-used
--        GPUs, without data, and held by debugging jobs, over every settled GPU row the results
--        hold, and the joules the GPUs used and lost (idle slots + never used; null where no
--        settled GPU row of the VC has a power reading, never 0); the counters
--        `gpuwaste_gpu_seconds_total{kind}` and `gpuwaste_energy_joules_total{kind}` of
--        `gpuwaste exporter` (docs/exporter.md#counters-and-windows).
-- sources: job_gpu_usage, job_usage, analyzed_until (registered by the exporter: per cluster,
--          `samples_until`, the newest GPU sample the last `gpuwaste analyze` saw; null or no
--          row: it saw none).
-- variables: none.
-- Counters must only grow, so a GPU row counts only once its figures are settled: its job has
-- ended and its allocation ended at least SETTLE (1 h) before the newest GPU sample analyze saw
-- (any time when analyze saw no sample: there is no telemetry to wait for). Before that, later
-- data re-sorts its seconds among the kinds (a never-used GPU starts working, late samples turn
-- "missing" into busy, a zero stretch grows past the idle-slot minimum), which would make a kind
-- fall; a running job grows. Those are served by the window gauges (window_hours.sql). The hour
-- leaves room for hosts whose samples arrive later than the others'.
-- Seconds are job_gpu_usage's GPU seconds (slice-weighted, docs/analyses.md#mig-instances); busy
-- is the rest of the allocated time, as in window_hours.sql.
with

per_vc as (
    select
        g.cluster, coalesce(j.vc, '(none)') as vc,
        sum(g.alloc_s) as alloc_s,
        sum(coalesce(g.idle_slot_s, 0)) as idle_s,
        sum(coalesce(g.never_used_s, 0)) as never_s,
        sum(coalesce(g.missing_s, 0)) as missing_s,
        coalesce(sum(g.alloc_s) filter (where j.is_debug), 0) as debug_s,
        sum(g.energy_kwh) * 3.6e6 as used_j,
        sum(g.lost_energy_kwh) * 3.6e6 as lost_j
    from job_gpu_usage as g
    join job_usage as j on j.cluster = g.cluster and j.job_id = g.job_id
    left join analyzed_until as a on a.cluster = g.cluster
    where g.alloc_s > 0
      and not coalesce(j.running, false)
      and (a.samples_until is null or g.end_ts <= a.samples_until - interval 1 hour)  -- SETTLE
    group by all
),

final as (
    select
        cluster, vc,
        alloc_s as allocated,
        greatest(alloc_s - idle_s - never_s - missing_s, 0) as busy,
        idle_s as idle_slot,
        never_s as never_used,
        missing_s as missing,
        debug_s as debug,
        used_j,
        lost_j
    from per_vc
    order by cluster, vc
)

select * from final
