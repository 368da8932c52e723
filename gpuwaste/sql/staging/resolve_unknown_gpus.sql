-- grain: one row per (job x attempt x host) allocation whose GPU index is unknown (-1) x each GPU
--        of that host whose samples carry the job's label (DCGM `hpc_job`) inside the interval.
-- sources: analyze_alloc (staging/allocations.sql), gpu_samples.
-- variables: cluster, date_lo, date_hi.
with

unknown as (
    select job_id, attempt, host, start_ts, end_ts
    from analyze_alloc
    where gpu < 0
),

labelled as (
    select host, gpu, ts, job_id
    from gpu_samples
    where cluster = getvariable('cluster')
      and date between getvariable('date_lo')::date and getvariable('date_hi')::date
      and job_id is not null
),

final as (
    select distinct u.job_id, u.attempt, u.host, l.gpu, u.start_ts, u.end_ts
    from unknown as u
    join labelled as l
      on l.host = u.host
     and l.job_id = u.job_id
     and l.ts >= u.start_ts
     and l.ts < u.end_ts
)

select * from final
