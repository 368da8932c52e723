-- grain: one row per job (of one host range): its GPU windows and how many fluctuate
--        [CloudBrain §IV-B]; per_job.py adds up the host ranges and applies the job share.
-- sources: util_minutes (staging/util_minutes.sql, this batch), analyze_alloc.
-- variables: fluctuation_range_pct, fluctuation_job_share.
-- choice: a window (fluctuation_window_s, from the attempt's start) of one GPU fluctuates when
-- max - min of its utilization exceeds fluctuation_range_pct points; a job fluctuates when more
-- than fluctuation_job_share of its GPU windows do.
-- Counted per GPU before the join to the jobs: the join then meets one row per GPU, not one per
-- minute.
-- Definition only, not run by `gpuwaste analyze`: allocation_sums.py computes the same rows in
-- one compiled pass over the samples, and tests/test_job_samples.py proves both equal.
with

windows as (
    select alloc_id, window_no, max(util_max) - min(util_min) as util_range
    from util_minutes
    group by alloc_id, window_no
),

per_gpu as (
    select
        alloc_id,
        count(*) as windows,
        count(*) filter (
            where util_range > getvariable('fluctuation_range_pct')::double
        ) as fluctuating_windows
    from windows
    group by alloc_id
),

final as (
    select
        a.job_id,
        sum(p.windows)::bigint as windows,
        sum(p.fluctuating_windows)::bigint as fluctuating_windows
    from per_gpu as p
    join analyze_alloc as a using (alloc_id)
    group by a.job_id
)

select * from final
