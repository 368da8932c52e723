-- grain: one row per job of the cluster: a fingerprint of its record and its allocations, the
--        first and last UTC day its allocations span, whether it runs, and the first of its
--        hosts (by name; NULL without allocations). `gpuwaste analyze` keeps these rows
--        (analyze_state/<cluster>.jobs.parquet) and compares them next time to find changed jobs.
-- sources: jobs, job_gpus, job_gpu_summaries (facts).
-- variables: cluster, as_of (how far the cluster's data reaches: the end of a running job).
-- choice: the allocations enter the fingerprint as their number and the sum of a 64-bit MD5 of
-- each (attempt, host, GPU, start, end): any added, removed or changed allocation changes it, and
-- the sum needs no order, so DuckDB keeps one small state per job (an ordered string_agg of the
-- allocations held 0.51 GiB at 8x, 610,841 jobs; this, 0.31 GiB; bench/RESULTS.md). A job's
-- Jobstats summary enters the same way, and only when it has one (concat_ws skips a null), so
-- the fingerprint of a job without one is what it was before summaries were read.
with

j as (select * from jobs where cluster = getvariable('cluster')),

g as (
    select
        job_id,
        count(*)::varchar || ':'
            || sum(md5_number_upper(concat_ws('|', attempt, host, gpu, start_ts, end_ts)))::varchar
            as allocs,
        min(start_ts) as first_ts,
        max(coalesce(end_ts, getvariable('as_of')::timestamptz)) as last_ts,
        min(host) as first_host
    from job_gpus
    where cluster = getvariable('cluster')
    group by job_id
),

summaries as (
    select
        job_id,
        count(*)::varchar || ':'
            || sum(md5_number_upper(concat_ws('|', host, gpu_minor, gpu, util_pct, mem_used_mib,
                mem_total_mib)))::varchar as figures
    from job_gpu_summaries
    where cluster = getvariable('cluster')
    group by job_id
),

final as (
    select
        j.job_id,
        md5(concat_ws('|', j.user, j.vc, j.name, j.state, j.raw_state, j.submit_ts,
            j.start_ts, j.end_ts, j.gpus, j.is_debug, coalesce(g.allocs, ''), s.figures))
            as fingerprint,
        coalesce(g.first_ts, j.start_ts)::date as first_day,
        coalesce(g.last_ts, j.end_ts, getvariable('as_of')::timestamptz)::date as last_day,
        j.end_ts is null or j.state = 'running' as running,
        g.first_host
    from j
    left join g using (job_id)
    left join summaries as s using (job_id)
)

select * from final
