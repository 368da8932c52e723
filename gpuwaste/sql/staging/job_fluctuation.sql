-- grain: one row per job (of one host range): its GPU windows and how many fluctuate
--        [CloudBrain §IV-B]; per_job.py adds up the host ranges and applies the job share.
-- sources: util_minutes (staging/util_minutes.sql, this batch), analyze_alloc.
-- variables: fluctuation_range_pct, fluctuation_job_share.
-- choice: a window (fluctuation_window_s, from the attempt's start) of one GPU fluctuates when
-- max - min of its utilization exceeds fluctuation_range_pct points; a job fluctuates when more
-- than fluctuation_job_share of its GPU windows do.
with

windows as (
    select
        a.job_id, m.alloc_id, m.window_no,
        max(m.util_max) - min(m.util_min) as util_range
    from util_minutes as m
    join analyze_alloc as a using (alloc_id)
    group by a.job_id, m.alloc_id, m.window_no
),

final as (
    select
        job_id,
        count(*) as windows,
        count(*) filter (
            where util_range > getvariable('fluctuation_range_pct')::double
        ) as fluctuating_windows
    from windows
    group by job_id
)

select * from final
