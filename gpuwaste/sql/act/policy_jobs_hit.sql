-- grain: one row per (idle threshold, job) the rule would have cancelled, as `--jobs` lists it:
--        the job's user, VC, GPUs, start and end, the cancel point and why, GPU hours reclaimed,
--        wrongful or not, GPU hours of work lost (certain, and at most).
-- sources: policy_hits (sql/act/policy_hits.sql), policy_jobs (sql/act/policy_jobs.sql),
--          job_usage.
with

final as (
    select
        h.cluster,
        h.idle_hours,
        h.job_id,
        u."user",
        j.vc,
        u.gpus,
        u.start_ts,
        u.end_ts,
        h.cancel_ts,
        h.reason,
        h.reclaimed_s / 3600 as reclaimed_gpu_h,
        h.wrongful,
        h.work_lost_s / 3600 as work_lost_gpu_h,
        h.work_lost_max_s / 3600 as work_lost_max_gpu_h
    from policy_hits as h
    join policy_jobs as j using (cluster, job_id)
    join job_usage as u using (cluster, job_id)
)

select * from final
