-- grain: one row per job x attempt x allocated GPU [ICSE24 §3.2, CloudBrain §IV-B/C].
-- sources: analyze_alloc (staging/allocations.sql), gpu_sample_stats, batch_idle_slots (this
--          batch's idle_slots), batch_phase_counts (phases per GPU from stable_phases.py),
--          alloc_models (staging/alloc_models.sql: each device's model), job_gpu_summaries
--          (facts: Jobstats' end-of-job summaries), batch_energy (energy.py: joules per allocation from power or
--          the energy counter), batch_held_idle (idle_slots.py: held-idle stretches).
-- variables: cluster, fallback_interval_s, min_observed_share, idle_mem_floor_mib.
-- cost_patterns and cost_prices: `[cost.gpu_hour]` (model glob -> price of a whole-GPU hour;
-- unset: no prices). gpu_cost = GPU hours (slice-weighted) x the model's price; lost_cost the
-- same for idle-slot + never-used GPU hours (docs/analyses.md#money).
-- choice: a whole GPU with no sample but a Jobstats summary (figures_from = 'jobstats-summary')
-- takes what the summary knows, over its whole allocation (Jobstats averaged the job's whole
-- life): util_mean = the summary's mean, mem_used_max_mib and mem_total_mib its figures; it is
-- never used when that mean is 0 and the most memory it used is at most idle_mem_floor_mib
-- (the rule of an idle sample, applied to the job's mean and peak), its allocated time then
-- never-used time, else busy time. What a mean cannot tell stays null: util_max, the mean
-- memory, idle slots, phases, the sampling interval. Samples, when a GPU has any, win
-- (figures_from = 'samples'); with neither, figures_from is null and the time is missing.
-- gpu_model: the device's model as staging/alloc_models.sql chooses it.
-- Every allocated second is exactly one of: idle slot, never used, busy (observed and not in an
-- idle slot, including idle runs too short to be slots), missing (no data):
--   idle_slot_s + never_used_s + busy_s + missing_s = alloc_s.
-- Idle held versus empty (#44, docs/definitions.md): idle_held_s, the held-idle stretches
-- (utilization 0, memory above the floor, longer than idle_slot_min_s: part of busy_s for the
-- studies), and idle_empty_s = idle_slot_s (both 0 where a Jobstats summary stands for samples,
-- as idle_slot_s). idle_held_s and its energy are null where the device has no memory reading
-- (the Philly trace): held idle is not measured there.
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
           sum(duration_s) as idle_slot_s, count(*) as idle_slots
    from batch_idle_slots
    group by job_id, attempt, host, gpu, gpu_instance
),

held as (  -- held-idle stretches (idle_slots.py held_stretches), per allocation
    select alloc_id, sum(duration_s) as idle_held_s
    from batch_held_idle
    group by alloc_id
),

phases as (
    select job_id, attempt, host, gpu, gpu_instance, n_phases, n_stable_phases
    from batch_phase_counts
),

summaries as (
    select job_id, host, gpu, util_pct, mem_used_mib, mem_total_mib
    from job_gpu_summaries
    where cluster = getvariable('cluster')
      and job_id in (select job_id from allocations)
    -- one summary GPU per device, should two minor numbers ever be tied to one index
    qualify row_number() over (partition by job_id, host, gpu order by gpu_minor) = 1
),

figures as (
    -- each allocation's samples' statistics, else its summary's figures (see the choice above)
    select
        a.alloc_id,
        s.alloc_id is not null as sampled,
        s.alloc_id is null and js.job_id is not null as summarized,
        case when s.alloc_id is not null then s.observed_s
             when js.job_id is not null then epoch(a.end_ts - a.start_ts) end as observed_s,
        case when s.alloc_id is not null then s.never_used
             when js.job_id is not null then js.util_pct <= 0
                 and coalesce(js.mem_used_mib, 0) <= getvariable('idle_mem_floor_mib')::double
        end as never_used,
        case when s.alloc_id is not null then s.util_mean else js.util_pct end as util_mean,
        s.util_max,
        s.mem_used_mean_mib,
        case when s.alloc_id is not null then s.mem_used_max_mib else js.mem_used_mib end
            as mem_used_max_mib,
        case when s.alloc_id is not null then s.mem_total_mib else js.mem_total_mib end
            as mem_total_mib,
        s.interval_s
    from allocations as a
    left join stats as s using (alloc_id)
    left join summaries as js
      on js.job_id = a.job_id and js.host = a.host and js.gpu = a.gpu
     and a.gpu_instance is null
),

joined as (
    select
        a.job_id,
        a.attempt,
        a.host,
        a.gpu,
        a.gpu_instance,
        a.mig_profile,
        am.gpu_model,
        a.gpu_weight,
        a.start_ts,
        a.end_ts,
        epoch(a.end_ts - a.start_ts) * a.gpu_weight as alloc_s,
        least(coalesce(s.observed_s, 0), epoch(a.end_ts - a.start_ts)) * a.gpu_weight
            as observed_s,
        coalesce(s.never_used, false) as never_used,
        coalesce(sl.idle_slot_s, 0) * a.gpu_weight as idle_slot_s,
        -- held idle is not measured without a memory reading (null, not 0)
        case when s.mem_used_max_mib is not null
            then coalesce(h.idle_held_s, 0) * a.gpu_weight end as idle_held_s,
        case when not s.summarized then coalesce(sl.idle_slots, 0) end as idle_slots,
        s.util_mean,
        s.util_max,
        s.mem_used_mean_mib,
        s.mem_used_max_mib,
        s.mem_total_mib,
        case when not s.summarized then coalesce(p.n_phases, 0) end as n_phases,
        case when not s.summarized then coalesce(p.n_stable_phases, 0) end as n_stable_phases,
        case when not s.summarized
            then coalesce(s.interval_s, getvariable('fallback_interval_s')::double) end
            as interval_s,
        case when s.sampled then 'samples' when s.summarized then 'jobstats-summary' end
            as figures_from,
        e.energy_j * a.gpu_weight / 3.6e6 as energy_kwh,
        e.lost_energy_j * a.gpu_weight / 3.6e6 as lost_energy_kwh,
        case when s.mem_used_max_mib is not null
            then e.held_energy_j * a.gpu_weight / 3.6e6 end as held_idle_energy_kwh,
        e.energy_j / nullif(e.power_s, 0) as power_mean_w
    from allocations as a
    left join figures as s using (alloc_id)
    left join batch_energy as e on e.alloc_id = a.alloc_id
    left join held as h on h.alloc_id = a.alloc_id
    left join alloc_models as am on am.alloc_id = a.alloc_id
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
        idle_slot_s as idle_empty_s,
        idle_slots,
        never_used,
        case when never_used then observed_s else 0 end as never_used_s,
        util_mean, util_max, mem_used_mean_mib, mem_used_max_mib, mem_total_mib,
        n_phases, n_stable_phases, interval_s, figures_from,
        observed_s < getvariable('min_observed_share')::double * alloc_s as low_data,
        alloc_s / 3600 * price_per_gpu_h as gpu_cost,
        (idle_slot_s + case when never_used then observed_s else 0 end) / 3600 * price_per_gpu_h
            as lost_cost,
        energy_kwh, lost_energy_kwh, held_idle_energy_kwh, power_mean_w
    from priced
)

select * from final
