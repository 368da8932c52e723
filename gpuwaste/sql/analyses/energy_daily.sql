-- grain: one row per VC (and '(all)') x GPU model (and '(all)') x UTC day: the GPUs' energy
--        and the part lost, the facility's energy, kg CO2e and money (docs/definitions.md#energy).
-- sources: job_gpu_usage, job_usage.
-- variables: cluster, all_vcs, all_models; energy_pue, energy_co2_g_per_kwh,
--            energy_price_per_kwh (the cluster's `[energy]` factors; the last two null when not
--            configured, and then so are kg CO2e and money).
-- kWh are job_gpu_usage's (slice-weighted on MIG); a device without a power reading has no
-- energy (null), not 0: `measured_gpu_h` says how many of the GPU hours the kWh are of.
-- facility kWh = kWh x PUE; kg CO2e = facility kWh x g/kWh / 1000; money = facility kWh x price.
-- An allocation's energy is split across the days it spans in proportion to its overlap with
-- each day (as waste_daily.sql: exact for the GPU hours, an even spread for the energy).
-- The rows of VC / model '(all)' are the groups of `cube(vc, gpu_model)` that roll a column
-- up, labelled with the variables all_vcs and all_models.
with

gpus as (
    select
        g.start_ts, g.end_ts, g.alloc_s, g.energy_kwh, g.lost_energy_kwh,
        coalesce(j.vc, '(none)') as vc, j.gpu_model
    from job_gpu_usage as g
    join job_usage as j on j.cluster = g.cluster and j.job_id = g.job_id
    where g.cluster = getvariable('cluster') and g.alloc_s > 0
),

days as (
    select
        *,
        unnest(
            generate_series(
                date_trunc('day', start_ts), end_ts - interval 1 microsecond, interval 1 day
            )
        ) as day_start
    from gpus
),

shares as (
    select
        *,
        epoch(least(end_ts, day_start + interval 1 day) - greatest(start_ts, day_start))
            / epoch(end_ts - start_ts) as share
    from days
),

summed as (
    select
        if(grouping(vc) = 1, getvariable('all_vcs'), vc) as vc,
        if(grouping(gpu_model) = 1, getvariable('all_models'), gpu_model) as gpu_model,
        cast(day_start as date) as day,
        sum(share * alloc_s) / 3600 as gpu_h,
        coalesce(sum(share * alloc_s) filter (where energy_kwh is not null), 0) / 3600
            as measured_gpu_h,
        sum(share * energy_kwh) as energy_kwh,
        sum(share * lost_energy_kwh) as lost_energy_kwh
    from shares
    group by cube(vc, gpu_model), day_start
),

final as (
    select
        vc, gpu_model, day, gpu_h, measured_gpu_h, energy_kwh, lost_energy_kwh,
        energy_kwh * getvariable('energy_pue')::double as facility_kwh,
        lost_energy_kwh * getvariable('energy_pue')::double as lost_facility_kwh,
        energy_kwh * getvariable('energy_pue')::double
            * getvariable('energy_co2_g_per_kwh')::double / 1000 as co2e_kg,
        lost_energy_kwh * getvariable('energy_pue')::double
            * getvariable('energy_co2_g_per_kwh')::double / 1000 as lost_co2e_kg,
        energy_kwh * getvariable('energy_pue')::double
            * getvariable('energy_price_per_kwh')::double as energy_cost,
        lost_energy_kwh * getvariable('energy_pue')::double
            * getvariable('energy_price_per_kwh')::double as lost_energy_cost
    from summed
)

select * from final
