-- grain: one row per allocation (job x attempt x GPU) x minute since the attempt's start (and
--        the fluctuation window holding that minute): sums for per-minute utilization and
--        min/max for fluctuation.
-- sources: sample_flags (staging).
-- Definition only, not run by `gpuwaste analyze`: its minutes are formed inside the compiled
-- loops of allocation_sums.py (in allocation and time order there), never as a frame, and
-- tests/test_job_samples.py proves that their readers' rows equal.
with

samples as (
    select alloc_id, window_no, minute, util, covered_s + tail_covered_s as weight_s
    from sample_flags
),

final as (
    select
        alloc_id, window_no, minute,
        sum(util * weight_s) as util_weighted,
        sum(weight_s) as weight_s,
        min(util) as util_min,
        max(util) as util_max
    from samples
    group by alloc_id, window_no, minute
)

select * from final
