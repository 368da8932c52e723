-- grain: one row per job of the batch with coarse-busy samples: the evidence of "looks busy"
--        (#44, docs/definitions.md "Looks busy"): of its GPUs' samples that carry the coarse busy
--        metric (`gpu_util`: DCGM GPU_UTIL, nvidia-smi's utilization), how many read it at or
--        above `busy_coarse_min_pct` while the fine activity (the larger of SM and tensor-pipe
--        activity) is at or under `busy_fine_max_pct`; their means beside. (job_usage.sql decides
--        looks_busy from it.)
-- sources: analyze_alloc (staging/allocations.sql), gpu_samples.
-- variables: cluster, date_lo, date_hi, host_lo, host_hi, busy_coarse_min_pct,
--            busy_fine_max_pct.
-- A sample without a fine metric is no evidence either way: it counts in `coarse_samples` only.
-- Samples are counted, not weighted by time: one exporter scrapes a job's GPUs at one interval.
with

allocs as (
    select job_id, host, gpu, gpu_instance, start_ts, end_ts from analyze_alloc where gpu >= 0
),

samples as (
    select
        host, gpu, gpu_instance, ts, gpu_util,
        greatest(sm_active, tensor_active) as fine
    from gpu_samples
    where cluster = getvariable('cluster')
      and date between getvariable('date_lo')::date and getvariable('date_hi')::date
      and host between getvariable('host_lo') and getvariable('host_hi')
      and gpu_util is not null
),

per_job as (
    select
        a.job_id,
        count(*) as coarse_samples,
        count(*) filter (
            where s.gpu_util >= getvariable('busy_coarse_min_pct')::double
              and s.fine <= getvariable('busy_fine_max_pct')::double
        ) as hollow_samples,
        avg(s.gpu_util) as coarse_util_mean,
        avg(s.fine) as fine_util_mean
    from allocs as a
    join samples as s
      on s.host = a.host and s.gpu = a.gpu and s.gpu_instance is not distinct from a.gpu_instance
     and s.ts >= a.start_ts and s.ts < a.end_ts
    group by a.job_id
),

final as (
    select * from per_job
)

select * from final
