-- grain: one row per idle slot of a job x attempt x GPU [CloudBrain §IV-C]: a run of idle samples
--        (utilization 0, memory at or under the floor) with no missing data inside, lasting
--        strictly longer than `idle_slot_min_s`. A never-used GPU has none: its whole observed
--        time is never-used time, not counted again here.
-- sources: sample_flags, gpu_sample_stats, analyze_alloc.
-- variables: idle_slot_min_s.
-- Only the samples that open or close a run are kept (a filter after the one window pass), and
-- each opening is paired with its closing by one more lead() over those few rows.
-- TEST ORACLE, not product code: `gpuwaste analyze` never runs it. The definition is
-- gpuwaste/analyses/idle_slots.py; this query states it again in SQL, and
-- tests/test_job_samples.py checks that both give the same rows.
with

boundaries as (
    select
        alloc_id, ts, run_start, run_end,
        ts - to_microseconds(cast(round(covered_s * 1e6) as bigint)) as opens_at,
        ts + to_microseconds(cast(round(tail_covered_s * 1e6) as bigint)) as closes_at
    from sample_flags
    where idle and (run_start or run_end)
),

paired as (
    select
        *,
        lead(closes_at) over (
            partition by alloc_id order by ts, run_end
        ) as next_closes_at
    from boundaries
),

runs as (
    select
        alloc_id,
        opens_at as start_ts,
        case when run_end then closes_at else next_closes_at end as end_ts
    from paired
    where run_start
),

never_used as (
    select alloc_id from gpu_sample_stats where never_used
),

final as (
    select
        a.job_id, a.attempt, a.host, a.gpu, a.gpu_instance, a.mig_profile, r.start_ts, r.end_ts,
        epoch(r.end_ts - r.start_ts) as duration_s
    from runs as r
    join analyze_alloc as a using (alloc_id)
    anti join never_used as n using (alloc_id)
    where epoch(r.end_ts - r.start_ts) > getvariable('idle_slot_min_s')::double
)

select * from final
