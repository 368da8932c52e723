-- grain: one row per job x per-minute utilization bucket (0..100): GPU-minutes [Philly §3, Fig. 5].
-- sources: util_minutes (staging/util_minutes.sql, this batch), analyze_alloc.
-- A minute is counted from its attempt's start; its utilization is the time-weighted mean of the
-- GPU's samples in it, and its weight the seconds of data in it (a minute with no data: none),
-- times the device's gpu_weight (a MIG instance's slice of its GPU, 1 for a whole GPU).
-- The bucket is the mean rounded down after adding 1e-9: a minute steady at 30 % whose sums of
-- sub-second weights divide to 29.999999999999996 is in bucket 30, not 29.
-- Definition only, not run by `gpuwaste analyze`: allocation_sums.py computes the same rows in
-- one compiled pass over the samples, and tests/test_job_samples.py proves both equal.
with

minutes as (
    select a.job_id, m.util_weighted, m.weight_s, m.weight_s * a.gpu_weight as gpu_weight_s
    from util_minutes as m
    join analyze_alloc as a using (alloc_id)
    where m.weight_s > 0
),

final as (
    select
        job_id,
        cast(least(100, greatest(0, floor(util_weighted / weight_s + 1e-9))) as smallint)
            as bucket,
        sum(gpu_weight_s) / 60.0 as gpu_minutes
    from minutes
    group by all
)

select * from final
