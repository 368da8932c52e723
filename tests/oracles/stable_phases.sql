-- grain: one row per run of near-equal memory readings of an allocation (job x attempt x GPU):
--        a run opens where memory steps by more than `phase_step_mib` from the previous reading,
--        or after missing data. The input that stable_phases.py merges into phases
--        [CloudBrain §IV-B].
-- sources: sample_flags.
-- variables: phase_step_mib (= phase_tolerance_mib / 8).
-- TEST ORACLE, not product code: `gpuwaste analyze` never runs it. The definition is
-- gpuwaste/analyses/stable_phases.py (`level_runs_frame`); this query states it again in SQL, and
-- tests/test_job_samples.py checks that both give the same rows.
-- A phase is a maximal run over which memory stays within a tolerance of its running level; that
-- merge is sequential, so it is done in polars/numpy over the (few) runs this query returns.
-- Readings find their run with an ASOF join to the run openings (a sort-merge), not a running sum.
with

readings as (
    select
        alloc_id, ts, mem_used_mib, mem_total_mib, gap_before,
        covered_s + tail_covered_s as weight_s,
        ts - to_microseconds(cast(round(covered_s * 1e6) as bigint)) as opens_at,
        ts + to_microseconds(cast(round(tail_covered_s * 1e6) as bigint)) as closes_at,
        prev_mem is null
            or gap_before
            or abs(mem_used_mib - prev_mem) > getvariable('phase_step_mib')::double as opens_run
    from sample_flags
    where mem_used_mib is not null
),

run_openings as (
    select alloc_id, ts as run_ts, gap_before
    from readings
    where opens_run
),

assigned as (
    select r.*, o.run_ts, o.gap_before as run_gap_before
    from readings as r
    asof join run_openings as o
      on r.alloc_id = o.alloc_id
     and r.ts >= o.run_ts
),

final as (
    select
        alloc_id,
        min(opens_at) as start_ts,
        max(closes_at) as end_ts,
        any_value(run_gap_before) as gap_before,
        sum(weight_s) as weight_s,
        sum(mem_used_mib * weight_s) as mem_x_s,
        avg(mem_used_mib) as mem_mean,
        min(mem_used_mib) as mem_min,
        max(mem_used_mib) as mem_max,
        max(mem_total_mib) as mem_total_mib
    from assigned
    group by alloc_id, run_ts
    order by alloc_id, run_ts
)

select * from final
