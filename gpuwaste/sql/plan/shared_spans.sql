-- grain: one row per allocation of the cluster on a known device (host, gpu, gpu_instance)
--        that may overlap another allocation of the same device (time-slicing, MPS:
--        docs/analyses.md#shared-gpus), with the interval it was held; usually no row at all.
-- sources: job_gpus, jobs (facts).
-- variables: cluster, as_of.
-- Made once per run (gpuwaste analyze writes it into the run's staging folder), so that a batch
-- finds the sharers of its allocations (staging/allocations.sql) among these few rows instead of
-- joining every allocation of the cluster again: that cost grew with the cluster, per batch.
-- choice: on each device, allocations in order of start: one overlaps another if an earlier one
-- ends after it starts or the next one starts before it ends (its interval [start_ts, end_ts)
-- as staging/allocations.sql takes it). Every allocation that overlaps another is listed, and
-- those with an empty or reversed interval too (a superset changes nothing downstream).
-- A running one (`running`: no end in job_gpus or jobs) is listed up to `as_of`: each batch
-- bounds it as it bounds its own (staging/alloc_intervals.sql takes it in, allocations.sql
-- bounds both), and a bounded end only shortens it, so the list stays a superset.
with

cluster_jobs as (
    select job_id, start_ts, end_ts
    from jobs
    where cluster = getvariable('cluster')
),

device_spans as (
    select
        g.job_id, g.attempt, g.host, g.gpu, g.gpu_instance,
        coalesce(g.start_ts, j.start_ts) as start_ts,
        coalesce(g.end_ts, j.end_ts, getvariable('as_of')::timestamptz) as end_ts,
        g.end_ts is null and j.end_ts is null as running
    from job_gpus as g
    left join cluster_jobs as j on j.job_id = g.job_id
    where g.cluster = getvariable('cluster') and g.gpu >= 0
),

ordered as (
    select
        *,
        max(end_ts) over (
            partition by host, gpu, gpu_instance order by start_ts, end_ts
            rows between unbounded preceding and 1 preceding
        ) as earlier_end,
        lead(start_ts) over (
            partition by host, gpu, gpu_instance order by start_ts, end_ts
        ) as next_start
    from device_spans
    where start_ts is not null and end_ts is not null
),

final as (
    select job_id, attempt, host, gpu, gpu_instance, start_ts, end_ts, running
    from ordered
    where earlier_end > start_ts or next_start < end_ts or end_ts <= start_ts
)

select * from final
