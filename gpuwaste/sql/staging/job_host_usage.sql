-- grain: one row per job x host with host samples: CPU and host memory utilization of that host
--        during the job [CloudBrain §III-B]: mean of the series, maximum beside. Percent 0-100.
--        (job_usage.sql takes the mean over the job's hosts.)
-- sources: analyze_alloc (staging/allocations.sql), host_samples.
-- variables: cluster, date_lo, date_hi, host_lo, host_hi.
with

job_hosts as (
    select distinct job_id, host, start_ts, end_ts from analyze_alloc
),

samples as (
    select host, ts, cpu_util, mem_used_frac
    from host_samples
    where cluster = getvariable('cluster')
      and date between getvariable('date_lo')::date and getvariable('date_hi')::date
      and host between getvariable('host_lo') and getvariable('host_hi')
),

per_host as (
    select
        h.job_id,
        h.host,
        avg(s.cpu_util) as cpu_mean,
        max(s.cpu_util) as cpu_max,
        avg(s.mem_used_frac) * 100 as mem_mean,
        max(s.mem_used_frac) * 100 as mem_max
    from job_hosts as h
    join samples as s on s.host = h.host and s.ts >= h.start_ts and s.ts < h.end_ts
    group by h.job_id, h.host
),

final as (
    select * from per_host
)

select * from final
