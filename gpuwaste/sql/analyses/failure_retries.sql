-- grain: one row per VC (and '(all)') x GPU model (and '(all)') x size class (1, 2-4, 5-8, >8,
--        all) [Philly §4.2, Figure 9a]: jobs that ran, their attempts and retries (attempts
--        after the first), failed attempts and the GPU hours they burned.
-- sources: job_gpus, job_usage, failure_attempts.
-- variables: cluster, all_vcs, all_models.
-- A job's attempts are its attempts in job_gpus (Slurm: one per run, several for a requeued
-- job read with `sacct --duplicates`; the Philly trace lists each retry). The rows of VC / model '(all)' are the groups of `cube(vc, gpu_model)`.
with

attempts as (
    select job_id, count(distinct attempt) as attempts
    from job_gpus
    where cluster = getvariable('cluster')
    group by job_id
),

failed as (
    select job_id, count(*) as failed_attempts, sum(gpu_s) as failed_gpu_s
    from failure_attempts
    where cluster = getvariable('cluster')
    group by job_id
),

jobs as (
    select
        coalesce(u.vc, '(none)') as vc, u.gpu_model, u.size_class, a.attempts,
        coalesce(f.failed_attempts, 0) as failed_attempts,
        coalesce(f.failed_gpu_s, 0) as failed_gpu_s
    from job_usage u
    join attempts a using (job_id)
    left join failed f using (job_id)
    where u.cluster = getvariable('cluster')
),

sized as (
    select * from jobs
    union all select * replace ('all' as size_class) from jobs
),

final as (
    select
        if(grouping(vc) = 1, getvariable('all_vcs'), vc) as vc,
        if(grouping(gpu_model) = 1, getvariable('all_models'), gpu_model) as gpu_model,
        size_class, count(*) as jobs,
        count(*) filter (where attempts > 1) as jobs_retried,
        100.0 * count(*) filter (where attempts > 1) / count(*) as retried_pct,
        sum(attempts - 1) as retries,
        avg(attempts - 1) as retries_mean,
        max(attempts - 1) as retries_max,
        sum(failed_attempts) as failed_attempts,
        sum(failed_gpu_s) / 3600.0 as failed_gpu_h
    from sized
    group by size_class, cube(vc, gpu_model)
)

select * from final
