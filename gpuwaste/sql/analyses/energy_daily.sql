-- grain: one row per VC (and '(all)') x GPU model (and '(all)') x UTC day: the GPUs' energy
--        and the part lost, the facility's energy, kg CO2e and money (docs/definitions.md#energy).
-- sources: allocation_days (staging/allocation_days.sql: job_gpu_usage x job_usage, one row
--          per allocated GPU x UTC day, with the day's share of the allocation).
-- variables: cluster, all_vcs, all_models; energy_pue, energy_co2_g_per_kwh,
--            energy_price_per_kwh (the cluster's `[energy]` factors; the last two null when not
--            configured, and then so are kg CO2e and money).
-- kWh are job_gpu_usage's (slice-weighted on MIG); a device without a power reading has no
-- energy (null), not 0: `measured_gpu_h` says how many of the GPU hours the kWh are of.
-- facility kWh = kWh x PUE; kg CO2e = facility kWh x g/kWh / 1000; money = facility kWh x price.
-- An allocation's energy is split across the days it spans in proportion to its overlap with
-- each day (allocation_days, as for waste_daily.sql: exact for the GPU hours, an even spread
-- for the energy).
-- The rows of VC / model '(all)' are the groups of `cube(vc, gpu_model)` that roll a column
-- up, labelled with the variables all_vcs and all_models.
with

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
    from allocation_days
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
