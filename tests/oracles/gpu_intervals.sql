-- grain: one row per allocation (job x attempt x GPU) with samples: the sampling interval its
--        gaps are judged by.
-- sources: job_samples (tests/oracles/job_samples.sql).
-- variables: sampling_interval_s (null = estimate), fallback_interval_s.
-- TEST ORACLE, not product code: `gpuwaste analyze` never runs it. The definition is
-- gpuwaste/analyses/sample_flags.py (`_interval`); this query states it again in SQL, and
-- tests/test_job_samples.py checks that both give the same rows.
-- [ICSE24 §3.2] choice: a gap longer than `missing_gap_intervals` sampling intervals is missing
-- data. The interval is the configured one, else the median spacing of the GPU's own samples.
with

spacing as (
    select alloc_id, dt_s
    from job_samples
    where not is_first and dt_s > 0
),

estimated as (
    select alloc_id, median(dt_s) as median_dt_s
    from spacing
    group by alloc_id
),

allocated as (
    select distinct alloc_id from job_samples
),

final as (
    select
        a.alloc_id,
        coalesce(
            getvariable('sampling_interval_s')::double,
            e.median_dt_s,
            getvariable('fallback_interval_s')::double
        ) as interval_s
    from allocated as a
    left join estimated as e using (alloc_id)
)

select * from final
