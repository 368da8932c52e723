-- grain: one row per allocated sample, classified: seconds it covers, idle or not, and whether it
--        opens or closes a run of idle/non-idle samples or of equal memory readings.
-- sources: job_samples, gpu_intervals.
-- variables: missing_gap_intervals.
-- TEST ORACLE, not product code: `gpuwaste analyze` never runs it. The definition is
-- gpuwaste/analyses/sample_flags.py; this query states it again in SQL, and
-- tests/test_job_samples.py checks that both give the same rows.
-- Time weighting [ICSE24 §3.2]: sample j stands for (t_(j-1), t_j], the first one from the
-- allocation's start; the last one also stands for the tail up to the allocation's end. A
-- stretch longer than the gap limit is missing data: it is covered by no sample.
with

samples as (
    select * from job_samples
),

limits as (
    select
        s.*,
        i.interval_s,
        i.interval_s * getvariable('missing_gap_intervals')::double as gap_limit_s
    from samples as s
    join gpu_intervals as i using (alloc_id)
),

final as (
    select
        *,
        case when dt_s <= gap_limit_s then dt_s else 0 end as covered_s,
        case
            when next_dt_s is null and tail_s <= gap_limit_s then tail_s else 0
        end as tail_covered_s,
        dt_s > gap_limit_s as gap_before,
        prev_idle is distinct from idle or prev_held is distinct from held or dt_s > gap_limit_s
            as run_start,
        next_idle is distinct from idle or next_held is distinct from held
            or coalesce(next_dt_s > gap_limit_s, true) as run_end,
        prev_mem is distinct from mem_used_mib or dt_s > gap_limit_s as level_start,
        next_mem is distinct from mem_used_mib
            or coalesce(next_dt_s > gap_limit_s, true) as level_end
    from limits
)

select * from final
