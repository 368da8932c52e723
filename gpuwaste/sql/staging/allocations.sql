-- grain: one row per job x attempt x allocated GPU of the jobs being analyzed, with the
--        interval [start_ts, end_ts) it was held (a running job: up to the watermark `as_of`),
--        numbered by alloc_id so that the per-sample pass carries one integer, not four keys.
-- sources: job_gpus, jobs (facts); analyze_batch (the job_ids of this run, one column job_id).
-- variables: cluster, as_of.
-- A GPU index of -1 (Slurm without GPU indices) is kept here; resolve_unknown_gpus.sql turns it
-- into the GPUs whose samples carry the job's label.
with

batch as (
    select distinct job_id from analyze_batch
),

cluster_jobs as (
    select job_id, start_ts, end_ts
    from jobs
    where cluster = getvariable('cluster')
),

cluster_job_gpus as (
    select job_id, attempt, host, gpu, start_ts, end_ts
    from job_gpus
    where cluster = getvariable('cluster')
),

intervals as (
    select
        g.job_id,
        g.attempt,
        g.host,
        g.gpu,
        coalesce(g.start_ts, j.start_ts) as start_ts,
        coalesce(g.end_ts, j.end_ts, getvariable('as_of')::timestamptz) as end_ts
    from cluster_job_gpus as g
    join batch as b on b.job_id = g.job_id
    left join cluster_jobs as j on j.job_id = g.job_id
),

final as (
    select
        row_number() over (order by job_id, attempt, host, gpu) as alloc_id,
        job_id, attempt, host, gpu, start_ts, end_ts
    from intervals
    where start_ts is not null and end_ts > start_ts
)

select * from final
