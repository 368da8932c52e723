-- grain: one row per sample of an allocated GPU inside its allocation [start_ts, end_ts), with
--        its neighbours in time: the one window pass (lag/lead over the allocation, by ts) that
--        every per-sample analysis starts from. Narrow on purpose: the allocation is alloc_id.
-- sources: analyze_alloc (staging/allocations.sql), gpu_samples.
-- variables: cluster, date_lo, date_hi, host_lo, host_hi, idle_mem_floor_mib,
--            fluctuation_window_s.
-- TEST ORACLE, not product code: `gpuwaste analyze` never runs it. The definition is
-- gpuwaste/analyses/job_samples.py; this query states it again in SQL, and
-- tests/test_job_samples.py checks that both give the same rows.
-- Idle [CloudBrain §IV-C]: utilization 0 and memory used at or under the floor (a source without
-- memory, e.g. Philly, judges by utilization alone). Samples repeated for several jobs on one GPU
-- (DCGM repeats the series per `hpc_job`) get dt_s = 0 and so carry no weight. A device is
-- (host, gpu, inst): inst is the MIG instance + 1, or 0 for a whole GPU (so it joins as a key).
with

allocations as (
    select alloc_id, host, gpu, coalesce(gpu_instance + 1, 0) as inst, start_ts, end_ts
    from analyze_alloc
    where gpu >= 0
),

overlap_flags as (
    -- an allocation overlapping another one on the same GPU (a shared GPU): rare, joined apart
    select
        *,
        coalesce(
            max(end_ts) over (
                partition by host, gpu, inst order by start_ts, alloc_id
                rows between unbounded preceding and 1 preceding
            ) > start_ts,
            false
        )
        or coalesce(
            lead(start_ts) over (partition by host, gpu, inst order by start_ts, alloc_id) < end_ts,
            false
        ) as is_shared
    from allocations
),

exclusive_allocs as (
    select alloc_id, host, gpu, inst, start_ts, end_ts from overlap_flags where not is_shared
),

shared_allocs as (
    select alloc_id, host, gpu, inst, start_ts, end_ts from overlap_flags where is_shared
),

samples as (
    select host, gpu, coalesce(gpu_instance + 1, 0) as inst, ts, util, mem_used_mib, mem_total_mib,
           power_w, energy_j, gpu_util, sm_active, tensor_active
    from gpu_samples
    where cluster = getvariable('cluster')
      and date between getvariable('date_lo')::date and getvariable('date_hi')::date
      and host between getvariable('host_lo') and getvariable('host_hi')
      and util is not null
),

matched as (
    -- each sample to the latest exclusive allocation of its GPU started at or before it (a
    -- sort-merge ASOF join: linear, where a range join compares every pair), kept if inside
    select a.alloc_id, a.start_ts, a.end_ts, s.ts, s.util, s.mem_used_mib, s.mem_total_mib,
           s.power_w, s.energy_j, s.gpu_util, s.sm_active, s.tensor_active
    from samples as s
    asof join exclusive_allocs as a
      on s.host = a.host
     and s.gpu = a.gpu
     and s.inst = a.inst
     and s.ts >= a.start_ts
    where s.ts < a.end_ts
    union all
    select a.alloc_id, a.start_ts, a.end_ts, s.ts, s.util, s.mem_used_mib, s.mem_total_mib,
           s.power_w, s.energy_j, s.gpu_util, s.sm_active, s.tensor_active
    from shared_allocs as a
    join samples as s
      on s.host = a.host
     and s.gpu = a.gpu
     and s.inst = a.inst
     and s.ts >= a.start_ts
     and s.ts < a.end_ts
),

allocated_samples as (
    select
        *,
        util = 0 and coalesce(mem_used_mib, 0) <= getvariable('idle_mem_floor_mib') as idle,
        util = 0 and coalesce(mem_used_mib, 0) > getvariable('idle_mem_floor_mib') as held
    from matched
),

final as (
    select
        alloc_id,
        ts,
        util,
        mem_used_mib,
        mem_total_mib,
        power_w,
        energy_j,
        gpu_util,
        sm_active,
        tensor_active,
        idle,
        held,
        lag(ts) over w is null as is_first,
        epoch(ts - coalesce(lag(ts) over w, start_ts)) as dt_s,
        epoch(lead(ts) over w - ts) as next_dt_s,
        epoch(end_ts - ts) as tail_s,
        floor(epoch(ts - start_ts) / 60) as minute,
        floor(epoch(ts - start_ts) / getvariable('fluctuation_window_s')::double) as window_no,
        lag(idle) over w as prev_idle,
        lag(util) over w as prev_util,
        lead(idle) over w as next_idle,
        lag(mem_used_mib) over w as prev_mem,
        lead(mem_used_mib) over w as next_mem,
        lag(held) over w as prev_held,
        lead(held) over w as next_held
    from allocated_samples
    window w as (partition by alloc_id order by ts)
)

select * from final
