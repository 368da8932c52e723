-- grain: one row per job with GPU time in the window [period_start, period_end) of one cluster:
--        its user, VC and low_data flag and its GPU hours allocated, in idle slots, on
--        never-used GPUs and lost (idle-slot + never-used) inside the window, and with [cost]
--        prices the money of those GPU hours (cost) and of the lost ones (lost_cost; null
--        without a price), and the energy of the lost GPU hours (lost_energy_kwh; null where no
--        GPU of the job has a power reading). Unordered; the digests read the rest of a job's record (job_usage)
--        only for the jobs they list.
-- sources: job_gpu_usage, job_usage.
-- variables: cluster, period_start, period_end (timestamptz), count_looks_busy (boolean).
-- With count_looks_busy (`gpuwaste notify --count-looks-busy`), a job that looks busy
-- (job_usage.looks_busy: GPU_UTIL high while SM/tensor activity or power is near idle) has its busy
-- seconds counted as idle: `looks_busy_gpu_h`, added to its lost hours, money and energy (the
-- energy of its busy seconds: a device's energy outside its idle slots, energy_kwh -
-- lost_energy_kwh, missing data drawing none).
-- Period rule (as sql/reports/waste_by.sql): a job is in the window when one of its GPU
-- allocations overlaps it (a running job's allocation reaches the watermark it was analyzed up
-- to); each allocation counts with the part of its figures inside the window, in proportion to
-- its overlap (exact for allocated hours, the others assumed spread evenly). The overlap is a
-- share of the allocation's wall time: its seconds are GPU seconds (slice-weighted on a MIG
-- instance, docs/analyses.md#mig-instances), and so is every figure here. (Microseconds since
-- the epoch, not interval arithmetic: 3x less CPU on 3.5 M allocations.)
with

gpus as (
    select
        job_id, alloc_s, idle_slot_s, never_used_s, busy_s, gpu_cost, lost_cost, energy_kwh,
        lost_energy_kwh,
        (
            epoch_us(least(end_ts, getvariable('period_end')::timestamptz))
            - epoch_us(greatest(start_ts, getvariable('period_start')::timestamptz))
        ) / (epoch_us(end_ts) - epoch_us(start_ts)) as share
    from job_gpu_usage
    where cluster = getvariable('cluster')
      and alloc_s > 0
      and end_ts > start_ts
      and end_ts > getvariable('period_start')::timestamptz
      and start_ts < getvariable('period_end')::timestamptz
),

per_job as (
    select
        job_id,
        sum(share * alloc_s) / 3600 as gpu_h,
        sum(share * idle_slot_s) / 3600 as idle_slot_gpu_h,
        sum(share * never_used_s) / 3600 as never_used_gpu_h,
        sum(share * (idle_slot_s + never_used_s)) / 3600 as lost_gpu_h,
        sum(share * busy_s) / 3600 as busy_gpu_h,
        sum(share * gpu_cost) as cost,
        sum(share * lost_cost) as lost_cost,
        sum(share * gpu_cost * busy_s / alloc_s) as busy_cost,
        sum(share * lost_energy_kwh) as lost_energy_kwh,
        sum(share * (energy_kwh - lost_energy_kwh)) as busy_energy_kwh
    from gpus
    group by job_id
),

final as (
    select
        j.job_id,
        coalesce(j."user", '(none)') as "user",
        coalesce(j.vc, '(none)') as vc,
        j.low_data,
        p.gpu_h,
        p.idle_slot_gpu_h,
        p.never_used_gpu_h,
        coalesce(b.counted, false) as looks_busy,
        case when b.counted then p.busy_gpu_h else 0 end as looks_busy_gpu_h,
        p.lost_gpu_h + case when b.counted then p.busy_gpu_h else 0 end as lost_gpu_h,
        p.cost,
        p.lost_cost + case when b.counted then p.busy_cost else 0 end as lost_cost,
        p.lost_energy_kwh + case when b.counted then p.busy_energy_kwh else 0 end
            as lost_energy_kwh
    from per_job as p
    join job_usage as j on j.cluster = getvariable('cluster') and j.job_id = p.job_id
    cross join lateral (
        select coalesce(getvariable('count_looks_busy')::boolean, false)
            and coalesce(j.looks_busy, false) as counted
    ) as b
)

select * from final
