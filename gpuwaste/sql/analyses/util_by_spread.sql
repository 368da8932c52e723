-- grain: one row per VC (and '(all)') x GPU model (and '(all)') x number of servers (hosts) of 16-GPU jobs
--        [Philly §3, Table 5]: jobs, mean GPU utilization (observed-time weighted) and the
--        50th, 90th and 95th percentiles of per-minute GPU utilization.
-- sources: job_usage, job_gpu_usage, job_util_hist.
-- variables: cluster, all_vcs, all_models.
-- The job's GPU model is job_usage.gpu_model (docs/analyses.md#split-by-gpu-model); the rows of
-- model '(all)' are every model together.
-- The rows of VC / model '(all)' are the groups of `cube(vc, gpu_model)` that roll a column
-- up, labelled with the variables all_vcs and all_models (ROLLUP_LABELS in
-- gpuwaste/warehouse/results.py, set by whatever runs the summaries).
with

jobs as (
    select job_id, coalesce(vc, '(none)') as vc, gpu_model, n_hosts as servers
    from job_usage
    where cluster = getvariable('cluster') and gpus = 16 and n_hosts > 0
),

means as (
    select
        if(grouping(e.vc) = 1, getvariable('all_vcs'), e.vc) as vc,
        if(grouping(e.gpu_model) = 1, getvariable('all_models'), e.gpu_model) as gpu_model,
        e.servers, count(distinct e.job_id) as jobs,
        sum(g.util_mean * g.observed_s) / nullif(sum(g.observed_s), 0) as util_mean
    from jobs as e
    left join job_gpu_usage as g
      on g.job_id = e.job_id and g.cluster = getvariable('cluster') and g.observed_s > 0
    group by e.servers, cube(e.vc, e.gpu_model)
),

buckets as (
    select
        if(grouping(e.vc) = 1, getvariable('all_vcs'), e.vc) as vc,
        if(grouping(e.gpu_model) = 1, getvariable('all_models'), e.gpu_model) as gpu_model,
        e.servers, h.bucket, sum(h.gpu_minutes) as gpu_minutes
    from jobs as e
    join job_util_hist as h on h.job_id = e.job_id and h.cluster = getvariable('cluster')
    group by e.servers, h.bucket, cube(e.vc, e.gpu_model)
),

cumulative as (
    select *,
        sum(gpu_minutes) over (partition by vc, gpu_model, servers order by bucket)
            / sum(gpu_minutes) over (partition by vc, gpu_model, servers) as cum_share
    from buckets
),

percentiles as (
    select vc, gpu_model, servers,
        min(bucket) filter (where cum_share >= 0.50) as util_p50,
        min(bucket) filter (where cum_share >= 0.90) as util_p90,
        min(bucket) filter (where cum_share >= 0.95) as util_p95
    from cumulative
    group by vc, gpu_model, servers
),

final as (
    select m.vc, m.gpu_model, m.servers, m.jobs, m.util_mean,
           p.util_p50::double as util_p50, p.util_p90::double as util_p90,
           p.util_p95::double as util_p95
    from means as m
    left join percentiles as p using (vc, gpu_model, servers)
)

select * from final
