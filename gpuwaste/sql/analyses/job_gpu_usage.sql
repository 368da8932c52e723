-- grain: one row per job x attempt x allocated GPU [ICSE24 §3.2, CloudBrain §IV-B/C].
-- sources: analyze_alloc (staging/allocations.sql), gpu_sample_stats, batch_idle_slots (this
--          batch's idle_slots), batch_phase_counts (phases per GPU from stable_phases.py).
-- variables: fallback_interval_s, min_observed_share.
-- Every allocated second is exactly one of: idle slot, never used, busy (observed and not in an
-- idle slot, including idle runs too short to be slots), missing (no data):
--   idle_slot_s + never_used_s + busy_s + missing_s = alloc_s.
with

allocations as (
    select alloc_id, job_id, attempt, host, gpu, start_ts, end_ts from analyze_alloc where gpu >= 0
),

stats as (
    select * from gpu_sample_stats
),

slots as (
    select job_id, attempt, host, gpu, sum(duration_s) as idle_slot_s, count(*) as idle_slots
    from batch_idle_slots
    group by job_id, attempt, host, gpu
),

phases as (
    select job_id, attempt, host, gpu, n_phases, n_stable_phases from batch_phase_counts
),

joined as (
    select
        a.job_id,
        a.attempt,
        a.host,
        a.gpu,
        a.start_ts,
        a.end_ts,
        epoch(a.end_ts - a.start_ts) as alloc_s,
        least(coalesce(s.observed_s, 0), epoch(a.end_ts - a.start_ts)) as observed_s,
        coalesce(s.never_used, false) as never_used,
        coalesce(sl.idle_slot_s, 0) as idle_slot_s,
        coalesce(sl.idle_slots, 0) as idle_slots,
        s.util_mean,
        s.util_max,
        s.mem_used_mean_mib,
        s.mem_used_max_mib,
        s.mem_total_mib,
        coalesce(p.n_phases, 0) as n_phases,
        coalesce(p.n_stable_phases, 0) as n_stable_phases,
        coalesce(s.interval_s, getvariable('fallback_interval_s')::double) as interval_s
    from allocations as a
    left join stats as s using (alloc_id)
    left join slots as sl using (job_id, attempt, host, gpu)
    left join phases as p using (job_id, attempt, host, gpu)
),

final as (
    select
        job_id, attempt, host, gpu, start_ts, end_ts,
        alloc_s,
        observed_s,
        alloc_s - observed_s as missing_s,
        case when never_used then 0 else observed_s - idle_slot_s end as busy_s,
        idle_slot_s,
        idle_slots,
        never_used,
        case when never_used then observed_s else 0 end as never_used_s,
        util_mean, util_max, mem_used_mean_mib, mem_used_max_mib, mem_total_mib,
        n_phases, n_stable_phases, interval_s,
        observed_s < getvariable('min_observed_share')::double * alloc_s as low_data
    from joined
)

select * from final
