-- grain: one row per allocation (job x attempt x GPU) with samples: time-weighted statistics.
-- sources: sample_flags.
-- U_i [ICSE24 §3.2] = sum_j u_ij (t_j - t_(j-1)) / observed seconds (missing data excluded).
-- never_used [CloudBrain §IV-C]: every sample idle (utilization 0 and memory at or under floor).
-- TEST ORACLE, not product code: `gpuwaste analyze` never runs it. The definition is
-- gpuwaste/analyses/allocation_sums.py (`gpu_sample_stats`); this query states it again in SQL, and
-- tests/test_job_samples.py checks that both give the same rows.
with

weighted as (
    select
        alloc_id, interval_s, util, mem_used_mib, mem_total_mib, idle,
        covered_s + tail_covered_s as weight_s
    from sample_flags
),

final as (
    select
        alloc_id,
        any_value(interval_s) as interval_s,
        count(*) as samples,
        sum(weight_s) as observed_s,
        sum(util * weight_s) / nullif(sum(weight_s), 0) as util_mean,
        max(util) as util_max,
        sum(mem_used_mib * weight_s) / nullif(sum(weight_s), 0) as mem_used_mean_mib,
        max(mem_used_mib) as mem_used_max_mib,
        max(mem_total_mib) as mem_total_mib,
        bool_and(idle) as never_used
    from weighted
    group by alloc_id
)

select * from final
