-- grain: one row per job x attempt x allocated GPU of the jobs being analyzed (`own`), with the
--        interval [start_ts, end_ts) it was held, a running one (no end in job_gpus or jobs)
--        up to `as_of`, the watermark of the cluster's data; and one row (not `own`) per
--        allocation of shared_spans on a device of theirs, the batch's own among them: the
--        allocations that may share a device with them. staging/allocations.sql's first part,
--        before it bounds every running one of both by its host's newest sample
--        (staging/host_newest.sql, which reads this) and divides shared devices.
-- sources: job_gpus, jobs (facts); analyze_batch (the job_ids of this run, one column job_id);
--          shared_spans (plan/shared_spans.sql: the cluster's allocations that may share a device).
-- variables: cluster, as_of.
-- macros: mig_slice_weight (gpuwaste/warehouse/mig.py, analyses/sqlfiles.define_macros).
-- choice: slice_weight is a device's share of one GPU's time: a MIG profile's compute slices /
-- the GPU's (7; 4 for A30's 1g.6gb, 2g.12gb, 4g.24gb), 1 for a whole GPU
-- (docs/analyses.md#mig-instances); tests/test_mig.py checks it against mig.py's Profile.weight. An allocation without a start, or that ends before it
-- starts, held nothing (a bound never changes that: it ends a running one after its start).
-- A sharer is here so that it is bounded as it is in its own batch: a running one shares its
-- device only up to the end it is counted to, not up to `as_of` (its host's data behind).
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
        mig_slice_weight(g.mig_profile)
            as slice_weight,
        coalesce(g.start_ts, j.start_ts) as start_ts,
        coalesce(g.end_ts, j.end_ts, getvariable('as_of')::timestamptz) as end_ts,
        g.end_ts is null and j.end_ts is null as running,
        true as own
    from cluster_job_gpus as g
    join batch as b on b.job_id = g.job_id
    left join cluster_jobs as j on j.job_id = g.job_id
),

sharers as (
    select s.job_id, s.attempt, s.host, s.gpu, s.gpu_instance, s.start_ts, s.end_ts, s.running,
        false as own
    from shared_spans as s
    semi join (select distinct host, gpu, gpu_instance from intervals) as d
      on d.host = s.host and d.gpu = s.gpu and d.gpu_instance is not distinct from s.gpu_instance
),

final as (
    select *
    from (select * from intervals union all by name select * from sharers)
    where start_ts is not null and end_ts > start_ts
)

select * from final
