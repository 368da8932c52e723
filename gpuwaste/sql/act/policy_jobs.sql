-- grain: one row per job an enforcement rule is replayed on: the jobs that started in
--        [period_start, period_end) and held GPU time, restricted by `only_jobs`
--        (docs/analyses.md#replaying-enforcement-rules).
-- sources: job_usage.
-- variables: cluster (null: every cluster), period_start, period_end (timestamptz; null: open),
--            only_jobs ('debugging': debugging declared or inferred; 'interactive': declared by the
--            scheduler (debug partition, QoS or a shell/Jupyter name); 'all'), count_looks_busy
--            (boolean; `--count-looks-busy`: a job that looks busy is treated as idle).
with

final as (
    select
        cluster,
        job_id,
        coalesce(vc, '(none)') as vc,
        start_ts,
        gpu_s,
        coalesce(is_debug_declared, false) as interactive,
        coalesce(getvariable('count_looks_busy')::boolean, false)
            and coalesce(looks_busy, false) as counted_idle
    from job_usage
    where start_ts is not null
      and gpu_s > 0
      and (getvariable('cluster') is null or cluster = getvariable('cluster'))
      and (getvariable('period_start') is null or start_ts >= getvariable('period_start')::timestamptz)
      and (getvariable('period_end') is null or start_ts < getvariable('period_end')::timestamptz)
      and case getvariable('only_jobs')
            when 'debugging' then coalesce(is_debug, false)
            when 'interactive' then coalesce(is_debug_declared, false)
            else true
          end
)

select * from final
