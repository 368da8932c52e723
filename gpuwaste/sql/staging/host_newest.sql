-- grain: one row per host of this batch that holds an allocation running at `as_of` (the
--        batch's own or a sharer of one of their devices: staging/alloc_intervals.sql), with
--        samples since the earliest such allocation of the host started: the host's newest
--        sample (gpu_samples or host_samples) before `as_of`. A host's samples carry its own
--        clock: a running allocation is counted up to them (staging/allocations.sql), never up
--        to another host's.
-- sources: alloc_intervals (staging/alloc_intervals.sql: before this bound), gpu_samples,
--          host_samples.
-- variables: cluster, as_of, date_lo, date_hi.
with

running as (
    select host, min(start_ts) as since
    from alloc_intervals
    where end_ts >= getvariable('as_of')::timestamptz
    group by host
),

samples as (
    select host, ts
    from gpu_samples
    where cluster = getvariable('cluster')
      and date between getvariable('date_lo')::date and getvariable('date_hi')::date
      and host in (select host from running)
    union all
    select host, ts
    from host_samples
    where cluster = getvariable('cluster')
      and date between getvariable('date_lo')::date and getvariable('date_hi')::date
      and host in (select host from running)
),

final as (
    select s.host, max(s.ts) as newest_ts
    from samples as s
    join running as r on r.host = s.host
    where s.ts >= r.since and s.ts < getvariable('as_of')::timestamptz
    group by s.host
)

select * from final
