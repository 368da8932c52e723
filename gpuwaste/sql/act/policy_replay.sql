-- grain: one row per cluster x idle threshold x VC, and the row '(all)' for every VC together:
--        what the rule would have done to the jobs it is replayed on.
-- sources: policy_jobs (sql/act/policy_jobs.sql), policy_hits (sql/act/policy_hits.sql).
-- variables: idle_hours (double[]).
with

thresholds as (
    select unnest(getvariable('idle_hours')::double[]) as idle_hours
),

jobs as (
    select j.*, t.idle_hours, h.job_id is not null as hit, h.reclaimed_s, h.work_lost_s,
           h.work_lost_max_s, coalesce(h.wrongful, false) as wrongful
    from policy_jobs as j
    cross join thresholds as t
    left join policy_hits as h using (cluster, job_id, idle_hours)
),

final as (
    select
        cluster,
        idle_hours,
        coalesce(vc, '(all)') as vc,
        count(*) as jobs,
        sum(gpu_s) / 3600 as gpu_h,
        count(*) filter (where hit) as jobs_hit,
        coalesce(sum(reclaimed_s), 0) / 3600 as reclaimed_gpu_h,
        100 * coalesce(sum(reclaimed_s), 0) / nullif(sum(gpu_s), 0) as reclaimed_pct,
        count(*) filter (where wrongful) as wrongful_hits,
        coalesce(sum(work_lost_s), 0) / 3600 as work_lost_gpu_h,
        coalesce(sum(work_lost_max_s), 0) / 3600 as work_lost_max_gpu_h
    from jobs
    group by grouping sets ((cluster, idle_hours, vc), (cluster, idle_hours))
)

select * from final
