-- grain: one row per job of this batch: its GPU rows rolled up, host CPU and memory, flags
--        and diagnoses [ICSE24 §3.2, Table 1; CloudBrain §III-B, §IV-B, §IV-C; Philly §3, §4].
-- sources: jobs, analyze_batch, batch_gpu_usage (job_gpu_usage of this batch), batch_host_usage
--          (job_host_usage.sql), batch_busy_evidence (looks_busy.py), batch_fluctuation
--          (job_fluctuation.sql), batch_checkpoint (job_checkpoint.sql), batch_idle_slots,
--          batch_phases (stable_phases.py).
-- variables: cluster, as_of and the thresholds named below; mig_model_fragments,
--            mig_smallest_mib, mig_smallest_weight (warehouse/mig.py: each MIG-capable model's
--            smallest profile; unset: no fits_smaller_slice diagnosis).
-- Job U = mean over its GPUs of U_i; GPU memory utilization = memory used / capacity, per GPU,
-- then mean (and max) over GPUs. A job with less than min_observed_share of its GPU time observed
-- is flagged low_data and given no diagnosis. gpu_model: the model its devices name, 'mixed'
-- when they name several, '(unknown)' when none does. A job whose GPUs are all known only from
-- a Jobstats summary (figures_from) has no idle-slot or phase counts (null): a mean tells none.
with

batch_jobs as (
    select j.*
    from jobs as j
    where j.cluster = getvariable('cluster')
      and j.job_id in (select job_id from analyze_batch)
),

gpus as (
    select
        *,
        list_position(
            list_transform(
                getvariable('mig_model_fragments')::varchar[], lambda f: contains(lower(gpu_model), f)
            ),
            true
        ) as mig_model
    from batch_gpu_usage
),

slice_fit as (
    -- "fits a smaller slice" [Job Defense Shield's "GPU too powerful, use MIG"]: every used
    -- whole GPU of the job is of a MIG-capable model, and its mean utilization and peak memory
    -- would fit that model's smallest MIG profile (utilization <= its share of the GPU)
    select
        job_id,
        bool_and(coalesce(
            gpu_weight = 1
            and util_mean <= 100 * list_extract(getvariable('mig_smallest_weight')::double[], mig_model)
            and mem_used_max_mib <= list_extract(getvariable('mig_smallest_mib')::double[], mig_model),
            false
        )) as fits_smaller_slice
    from gpus
    where observed_s > 0 and not never_used
    group by job_id
),

per_job_gpu as (
    select
        job_id,
        count(distinct host) as n_hosts,
        min(start_ts) as first_start,
        max(end_ts) as last_end,
        sum(alloc_s) as gpu_s,
        sum(observed_s) as observed_s,
        avg(util_mean) as util_mean,
        max(util_max) as util_max,
        avg(100 * mem_used_mean_mib / nullif(mem_total_mib, 0)) as mem_util_mean,
        max(100 * mem_used_max_mib / nullif(mem_total_mib, 0)) as mem_util_max,
        sum(idle_slot_s) as idle_slot_gpu_s,
        sum(idle_slots) as idle_slots,
        sum(idle_held_s) as idle_held_gpu_s,
        sum(never_used_s) as never_used_gpu_s,
        count(*) filter (where never_used) as never_used_gpus,
        count(*) filter (where not never_used and observed_s > 0) as used_gpus,
        sum(n_phases) as n_phases,
        sum(n_stable_phases) as n_stable_phases,
        bool_and(coalesce(figures_from = 'jobstats-summary', false)) as summary_only,
        sum(gpu_cost) as gpu_cost,
        sum(lost_cost) as lost_cost,
        sum(energy_kwh) as energy_kwh,
        sum(lost_energy_kwh) as lost_energy_kwh,
        sum(held_idle_energy_kwh) as held_idle_energy_kwh,
        -- the job's GPU model: the one model its devices name, 'mixed' when they name two or
        -- more (devices whose model is unknown are left out), '(unknown)' when none names one
        case when count(distinct gpu_model) > 1 then 'mixed' else min(gpu_model) end as gpu_model
    from gpus
    group by job_id
),

first_attempt as (
    select job_id, count(*) as first_attempt_gpus
    from gpus
    where (job_id, attempt) in (select job_id, min(attempt) from gpus group by job_id)
    group by job_id
),

edges as (
    -- idle over the first / final stretch of every used GPU [ICSE24 Table 1]
    select
        g.job_id,
        bool_and(coalesce(s.head_idle_s, 0) >= getvariable('slow_start_min_s')::double)
            as slow_start,
        bool_and(coalesce(s.tail_idle_s, 0) >= getvariable('unreleased_min_s')::double)
            as unreleased
    from gpus as g
    left join (
        select
            i.job_id, i.attempt, i.host, i.gpu, i.gpu_instance,
            max(i.duration_s) filter (
                where i.start_ts <= u.start_ts + to_microseconds(cast(u.interval_s * 1e6 as bigint))
            ) as head_idle_s,
            max(i.duration_s) filter (
                where i.end_ts >= u.end_ts - to_microseconds(cast(u.interval_s * 1e6 as bigint))
            ) as tail_idle_s
        from batch_idle_slots as i
        join gpus as u
          on u.job_id = i.job_id and u.attempt = i.attempt and u.host = i.host
         and u.gpu = i.gpu and u.gpu_instance is not distinct from i.gpu_instance
        group by all
    ) as s
      on s.job_id = g.job_id and s.attempt = g.attempt and s.host = g.host and s.gpu = g.gpu
     and s.gpu_instance is not distinct from g.gpu_instance
    where not g.never_used and g.observed_s > 0
    group by g.job_id
),

host_usage as (
    -- mean over the job's hosts of each host's mean [CloudBrain §III-B]
    select
        job_id,
        avg(cpu_mean) as cpu_util_mean,
        max(cpu_max) as cpu_util_max,
        avg(mem_mean) as host_mem_util_mean,
        max(mem_max) as host_mem_util_max
    from batch_host_usage
    group by job_id
),

busy as (
    -- looks busy (#44, docs/definitions.md#looks-busy): the coarse metric high while the fine
    -- activity is near zero (fine arm) or, on samples without it, power near the model's idle
    -- power (power arm), in more than looks_busy_share of the job's samples carrying the coarse
    -- metric; null (not judged) where no sample has a fine metric or a usable power
    select
        job_id,
        case when fine_samples + power_samples > 0
            then hollow_samples + low_power_samples
                > getvariable('looks_busy_share')::double * coarse_samples
        end as looks_busy,
        hollow_samples > 0 as fine_arm,
        low_power_samples > 0 as power_arm,
        round(100.0 * hollow_samples / coarse_samples) as hollow_pct,
        round(100.0 * low_power_samples / coarse_samples) as low_power_pct,
        round(coarse_util_mean) as coarse_util_mean,
        round(fine_util_mean, 1) as fine_util_mean,
        round(power_mean_w) as power_mean_w,
        round(idle_power_w) as idle_power_w,
        round(power_mean_w / idle_power_w, 1) as power_idle_x
    from batch_busy_evidence
    where coarse_samples > 0
),

phase_spread as (
    select job_id, max(spread) as phase_level_spread_mib
    from (
        select job_id, attempt, host, gpu, gpu_instance,
               max(mem_level_mib) - min(mem_level_mib) as spread
        from batch_phases
        group by all
    )
    group by job_id
),

joined as (
    select
        j.job_id,
        j.user,
        j.vc,
        coalesce(g.gpu_model, '(unknown)') as gpu_model,
        j.name,
        coalesce(j.state, 'running') as state,
        j.raw_state,
        j.end_ts is null or j.state = 'running' as running,
        coalesce(j.gpus, fa.first_attempt_gpus, 0) as gpus,
        coalesce(g.n_hosts, 0) as n_hosts,
        coalesce(j.is_debug, false) as is_debug_declared,
        j.submit_ts,
        coalesce(j.start_ts, g.first_start) as start_ts,
        j.end_ts,
        epoch(
            coalesce(j.end_ts, g.last_end, getvariable('as_of')::timestamptz)
            - coalesce(j.start_ts, g.first_start)
        ) as duration_s,
        epoch(coalesce(j.start_ts, g.first_start) - j.submit_ts) as queue_delay_s,
        coalesce(g.gpu_s, 0) as gpu_s,
        coalesce(g.observed_s, 0) / nullif(g.gpu_s, 0) as observed_share,
        g.util_mean, g.util_max, g.mem_util_mean, g.mem_util_max,
        h.cpu_util_mean, h.cpu_util_max, h.host_mem_util_mean, h.host_mem_util_max,
        coalesce(g.idle_slot_gpu_s, 0) as idle_slot_gpu_s,
        case when not coalesce(g.summary_only, false) then coalesce(g.idle_slots, 0) end
            as idle_slots,
        g.idle_held_gpu_s,  -- null where no GPU of the job has a memory reading
        coalesce(g.never_used_gpu_s, 0) as never_used_gpu_s,
        coalesce(g.never_used_gpus, 0) as never_used_gpus,
        coalesce(g.used_gpus, 0) as used_gpus,
        case when not coalesce(g.summary_only, false) then coalesce(g.n_phases, 0) end
            as n_phases,
        case when not coalesce(g.summary_only, false) then coalesce(g.n_stable_phases, 0) end
            as n_stable_phases,
        p.phase_level_spread_mib,
        coalesce(f.fluctuating, false) as fluctuating,
        coalesce(k.checkpointing_gpus, 0) > 0 as checkpointing,
        coalesce(e.slow_start, false) as slow_start,
        coalesce(e.unreleased, false) as unreleased,
        coalesce(sf.fits_smaller_slice, false) as fits_smaller_slice,
        b.looks_busy, b.fine_arm, b.power_arm, b.hollow_pct, b.low_power_pct,
        b.coarse_util_mean, b.fine_util_mean, b.power_mean_w, b.idle_power_w, b.power_idle_x,
        g.gpu_cost,
        g.lost_cost,
        g.energy_kwh,
        g.lost_energy_kwh,
        g.held_idle_energy_kwh
    from batch_jobs as j
    left join per_job_gpu as g using (job_id)
    left join first_attempt as fa using (job_id)
    left join host_usage as h using (job_id)
    left join batch_fluctuation as f using (job_id)
    left join batch_checkpoint as k using (job_id)
    left join edges as e using (job_id)
    left join phase_spread as p using (job_id)
    left join slice_fit as sf using (job_id)
    left join busy as b using (job_id)
),

flagged as (
    select
        *,
        case
            when gpus <= 1 then '1'
            when gpus <= 4 then '2-4'
            when gpus <= 8 then '5-8'
            else '>8'
        end as size_class,
        coalesce(observed_share, 0) < getvariable('min_observed_share')::double as low_data,
        not is_debug_declared
            and idle_slot_gpu_s > getvariable('infer_debug_idle_share')::double * gpu_s
            and idle_slots >= getvariable('infer_debug_min_slots')::bigint as is_debug_inferred,
        (idle_slot_gpu_s + never_used_gpu_s) / nullif(gpu_s, 0) as idle_share,
        coalesce(upper(raw_state) like 'TIMEOUT%', false)
            or duration_s >= getvariable('debug_max_duration_h')::double * 3600
                - getvariable('debug_limit_tolerance_s')::double as hit_time_limit
    from joined
),

diagnosed as (
    select
        *,
        is_debug_declared or is_debug_inferred as is_debug,
        -- ICSE24's causes for low-utilization jobs; looks_busy whatever the utilization (a busy
        -- loop's utilization reads 100 % where GPU_UTIL is the only utilization series)
        -- a low_data job is not diagnosed (flagged, not judged), but a looks_busy verdict keeps
        -- its evidence: looks_busy = true is never shown without it
        concat_ws(',',
            case when not low_data
                      and coalesce(util_mean, 0) <= getvariable('low_util_pct')::double
            then nullif(concat_ws(',',
                case when mem_util_max <= getvariable('batch_mem_peak_pct')::double
                     then 'improper_batch_size' end,
                case when mem_util_max > getvariable('insufficient_mem_peak_pct')::double
                     then 'insufficient_gpu_memory' end,
                case when never_used_gpus > 0 and used_gpus > 0 then 'gpu_oversubscription' end,
                case when unreleased then 'unreleased_job' end,
                case when slow_start then 'slow_start' end,
                case when never_used_gpus > 0 and used_gpus = 0
                          and cpu_util_mean > getvariable('very_low_pct')::double
                     then 'non_dl_job' end,
                case when is_debug_declared or is_debug_inferred then 'interactive_job' end,
                case when checkpointing then 'synchronous_checkpointing' end,
                case when fits_smaller_slice then 'fits_smaller_slice' end
            ), '') end,
            -- the evidence in the text, per arm that fired: GPU_UTIL's mean, SM/tensor
            -- activity's (fine) or power's and the model's idle power (power), and the share
            case when looks_busy then 'looks_busy' || ' (' || concat_ws('; ',
                case when fine_arm then format(
                    'GPU_UTIL {:.0f} % while SM/tensor activity {} % in {:.0f} % of samples',
                    coarse_util_mean, fine_util_mean, hollow_pct
                ) end,
                case when power_arm then format(
                    -- no comma: the diagnoses are comma-separated (act/advice.py diagnoses_of)
                    'GPU_UTIL {:.0f} % while power {:.0f} W ({} x the model''s idle {:.0f} W) '
                    || 'in {:.0f} % of samples',
                    coarse_util_mean, power_mean_w, power_idle_x, idle_power_w, low_power_pct
                ) end
            ) || ')' end
        ) as diagnoses
    from flagged
),

final as (
    select
        job_id, user, vc, gpu_model, name, state, raw_state, running, gpus, size_class, n_hosts,
        is_debug, is_debug_declared, is_debug_inferred, submit_ts, start_ts, end_ts,
        duration_s, queue_delay_s, gpu_s, observed_share, low_data,
        util_mean, util_max, mem_util_mean, mem_util_max,
        cpu_util_mean, cpu_util_max, host_mem_util_mean, host_mem_util_max,
        idle_slot_gpu_s, idle_slots, idle_held_gpu_s, never_used_gpu_s, never_used_gpus,
        idle_share, n_phases, n_stable_phases, phase_level_spread_mib, fluctuating,
        checkpointing, hit_time_limit, looks_busy, diagnoses, gpu_cost, lost_cost, energy_kwh,
        lost_energy_kwh, held_idle_energy_kwh
    from diagnosed
)

select * from final
