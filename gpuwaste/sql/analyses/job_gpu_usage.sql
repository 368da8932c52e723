-- grain: one row per job x attempt x allocated GPU [ICSE24 §3.2, CloudBrain §IV-B/C].
-- sources: analyze_alloc (staging/allocations.sql), gpu_sample_stats, batch_idle_slots (this
--          batch's idle_slots), batch_phase_counts (phases per GPU from stable_phases.py),
--          device_models (staging/device_models.sql), batch_energy (energy.py: joules per
--          allocation from power or the energy counter).
-- variables: fallback_interval_s, min_observed_share, gpu_model_patterns and gpu_model_names
--            (the cluster's `gpu_models` map: host glob -> model; unset: none).
-- cost_patterns and cost_prices: `[cost.gpu_hour]` (model glob -> price of a whole-GPU hour;
-- unset: no prices). gpu_cost = GPU hours (slice-weighted) x the model's price; lost_cost the
-- same for idle-slot + never-used GPU hours (docs/analyses.md#money).
-- gpu_model: DCGM modelName of the device's samples, else the first host pattern that matches,
-- else the scheduler's GPU type (Slurm GRES type).
-- Every allocated second is exactly one of: idle slot, never used, busy (observed and not in an
-- idle slot, including idle runs too short to be slots), missing (no data):
--   idle_slot_s + never_used_s + busy_s + missing_s = alloc_s.
-- A device is a whole GPU or a MIG instance; its seconds are GPU seconds, wall seconds x
-- gpu_weight (the instance's slice of its GPU; 1 for a whole GPU), so that every roll-up of GPU
-- time counts a 1g.10gb instance as 1/7 of a GPU (docs/analyses.md#mig-instances). Energy too:
-- the exporter repeats the parent GPU's power on each instance, so an instance's joules are its
-- readings' x gpu_weight, and a split GPU's add up to the whole one's (docs/definitions.md#energy).
with

allocations as (
    select alloc_id, job_id, attempt, host, gpu, gpu_instance, mig_profile, gpu_model, gpu_weight,
           start_ts, end_ts
    from analyze_alloc
    where gpu >= 0
),

stats as (
    select * from gpu_sample_stats
),

slots as (
    select job_id, attempt, host, gpu, gpu_instance,
           sum(duration_s) as idle_slot_s, sum(held_s) as idle_held_s, count(*) as idle_slots
    from batch_idle_slots
    group by job_id, attempt, host, gpu, gpu_instance
),

phases as (
    select job_id, attempt, host, gpu, gpu_instance, n_phases, n_stable_phases
    from batch_phase_counts
),

joined as (
    select
        a.job_id,
        a.attempt,
        a.host,
        a.gpu,
        a.gpu_instance,
        a.mig_profile,
        coalesce(
            dm.gpu_model,
            list_extract(
                getvariable('gpu_model_names')::varchar[],
                list_position(
                    list_transform(
                        getvariable('gpu_model_patterns')::varchar[], lambda p: a.host glob p
                    ),
                    true
                )
            ),
            a.gpu_model
        ) as gpu_model,
        a.gpu_weight,
        a.start_ts,
        a.end_ts,
        epoch(a.end_ts - a.start_ts) * a.gpu_weight as alloc_s,
        least(coalesce(s.observed_s, 0), epoch(a.end_ts - a.start_ts)) * a.gpu_weight
            as observed_s,
        coalesce(s.never_used, false) as never_used,
        coalesce(sl.idle_slot_s, 0) * a.gpu_weight as idle_slot_s,
        coalesce(sl.idle_held_s, 0) * a.gpu_weight as idle_held_s,
        coalesce(sl.idle_slots, 0) as idle_slots,
        s.util_mean,
        s.util_max,
        s.mem_used_mean_mib,
        s.mem_used_max_mib,
        s.mem_total_mib,
        coalesce(p.n_phases, 0) as n_phases,
        coalesce(p.n_stable_phases, 0) as n_stable_phases,
        coalesce(s.interval_s, getvariable('fallback_interval_s')::double) as interval_s,
        e.energy_j * a.gpu_weight / 3.6e6 as energy_kwh,
        e.lost_energy_j * a.gpu_weight / 3.6e6 as lost_energy_kwh,
        e.energy_j / nullif(e.power_s, 0) as power_mean_w
    from allocations as a
    left join stats as s using (alloc_id)
    left join batch_energy as e on e.alloc_id = a.alloc_id
    left join device_models as dm
      on dm.host = a.host and dm.gpu = a.gpu and dm.gpu_instance is not distinct from a.gpu_instance
    left join slots as sl
      on sl.job_id = a.job_id and sl.attempt = a.attempt and sl.host = a.host
     and sl.gpu = a.gpu and sl.gpu_instance is not distinct from a.gpu_instance
    left join phases as p
      on p.job_id = a.job_id and p.attempt = a.attempt and p.host = a.host
     and p.gpu = a.gpu and p.gpu_instance is not distinct from a.gpu_instance
),

priced as (
    select
        *,
        list_extract(
            getvariable('cost_prices')::double[],
            list_position(
                list_transform(
                    getvariable('cost_patterns')::varchar[], lambda p: coalesce(gpu_model, '') glob p
                ),
                true
            )
        ) as price_per_gpu_h
    from joined
),

final as (
    select
        job_id, attempt, host, gpu, gpu_instance, mig_profile, gpu_model, gpu_weight,
        start_ts, end_ts,
        alloc_s,
        observed_s,
        alloc_s - observed_s as missing_s,
        case when never_used then 0 else observed_s - idle_slot_s end as busy_s,
        idle_slot_s,
        idle_held_s,
        idle_slot_s - idle_held_s as idle_empty_s,
        idle_slots,
        never_used,
        case when never_used then observed_s else 0 end as never_used_s,
        util_mean, util_max, mem_used_mean_mib, mem_used_max_mib, mem_total_mib,
        n_phases, n_stable_phases, interval_s,
        observed_s < getvariable('min_observed_share')::double * alloc_s as low_data,
        alloc_s / 3600 * price_per_gpu_h as gpu_cost,
        (idle_slot_s + case when never_used then observed_s else 0 end) / 3600 * price_per_gpu_h
            as lost_cost,
        energy_kwh, lost_energy_kwh, power_mean_w
    from priced
)

select * from final
