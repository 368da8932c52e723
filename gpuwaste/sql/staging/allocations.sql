-- grain: one row per job x attempt x allocated GPU of the jobs being analyzed, with the
--        interval [start_ts, end_ts) it was held (a running job: up to the watermark `as_of`),
--        numbered by alloc_id so that the per-sample pass carries one integer, not five keys.
--        A device is a whole GPU (gpu_instance null) or a MIG instance of one; gpu_weight is its
--        share of one GPU's time: a profile's compute slices / the GPU's (7; 4 for A30's
--        1g.6gb, 2g.12gb, 4g.24gb), 1 for a whole GPU (docs/analyses.md#mig-instances).
--        gpuwaste/warehouse/mig.py states the same rule; tests/test_mig.py checks they agree.
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
    select job_id, attempt, host, gpu, gpu_instance, mig_profile, gpu_model, start_ts, end_ts
    from job_gpus
    where cluster = getvariable('cluster')
),

intervals as (
    select
        g.job_id,
        g.attempt,
        g.host,
        g.gpu,
        g.gpu_instance,
        g.mig_profile,
        g.gpu_model,
        coalesce(try_cast(regexp_extract(lower(g.mig_profile), '^(\d+)g\.', 1) as double)
            / case when regexp_extract(lower(g.mig_profile), '^(\d+g\.\d+gb)', 1)
                        in ('1g.6gb', '2g.12gb', '4g.24gb') then 4.0 else 7.0 end, 1.0) as gpu_weight,
        coalesce(g.start_ts, j.start_ts) as start_ts,
        coalesce(g.end_ts, j.end_ts, getvariable('as_of')::timestamptz) as end_ts
    from cluster_job_gpus as g
    join batch as b on b.job_id = g.job_id
    left join cluster_jobs as j on j.job_id = g.job_id
),

final as (
    select
        row_number() over (order by job_id, attempt, host, gpu, gpu_instance) as alloc_id,
        job_id, attempt, host, gpu, gpu_instance, mig_profile, gpu_model, gpu_weight,
        start_ts, end_ts
    from intervals
    where start_ts is not null and end_ts > start_ts
)

select * from final
