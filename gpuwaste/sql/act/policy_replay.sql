-- grain: one row per cluster x idle threshold x VC, and the row '(all)' for every VC together:
--        what the rule would have done to the jobs it is replayed on.
-- sources: policy_jobs (sql/act/policy_jobs.sql), policy_hits (sql/act/policy_hits.sql).
-- variables: idle_hours (double[]), all_vcs (the label of the all-VC rows).
-- The jobs replayed and the hits are summed apart (grouping sets: per VC, and all VCs with a
-- null VC), then joined: never one row per job x threshold.
with

thresholds as (
    select unnest(getvariable('idle_hours')::double[]) as idle_hours
),

replayed as (
    select cluster, vc, count(*) as jobs, sum(gpu_s) as gpu_s
    from policy_jobs
    group by grouping sets ((cluster, vc), (cluster))
),

hits as (
    select
        h.cluster, h.idle_hours, j.vc,
        count(*) as jobs_hit,
        sum(h.reclaimed_s) as reclaimed_s,
        count(*) filter (where h.wrongful) as wrongful_hits,
        sum(h.work_lost_s) as work_lost_s,
        sum(h.work_lost_max_s) as work_lost_max_s
    from policy_hits as h
    join policy_jobs as j using (cluster, job_id)
    group by grouping sets ((h.cluster, h.idle_hours, j.vc), (h.cluster, h.idle_hours))
),

final as (
    select
        r.cluster,
        t.idle_hours,
        coalesce(r.vc, getvariable('all_vcs')) as vc,
        r.jobs,
        r.gpu_s / 3600 as gpu_h,
        coalesce(h.jobs_hit, 0) as jobs_hit,
        coalesce(h.reclaimed_s, 0) / 3600 as reclaimed_gpu_h,
        100 * coalesce(h.reclaimed_s, 0) / nullif(r.gpu_s, 0) as reclaimed_pct,
        coalesce(h.wrongful_hits, 0) as wrongful_hits,
        coalesce(h.work_lost_s, 0) / 3600 as work_lost_gpu_h,
        coalesce(h.work_lost_max_s, 0) / 3600 as work_lost_max_gpu_h
    from replayed as r
    cross join thresholds as t
    left join hits as h
        on h.cluster = r.cluster
        and h.idle_hours = t.idle_hours
        and h.vc is not distinct from r.vc
)

select * from final
