-- grain: one row per job (of one host range) that has a GPU whose utilization drops to 0 at a
--        regular period: synchronous checkpointing [ICSE24 Table 1].
-- sources: job_samples (tests/oracles/job_samples.sql, this batch), analyze_alloc.
-- variables: checkpoint_min_dips, checkpoint_spacing_tolerance.
-- choice: a dip starts at a sample with utilization 0 that follows one above 0 (so an idle first
-- stretch is not a dip), and before the GPU's last busy sample (so an idle final stretch is not
-- one either); memory may be held. A GPU checkpoints when it has at least checkpoint_min_dips
-- dips and the spacing between consecutive dip starts varies by under
-- checkpoint_spacing_tolerance: (max - min) / mean < tolerance.
-- TEST ORACLE, not product code: `gpuwaste analyze` never runs it. The definition is
-- gpuwaste/analyses/allocation_sums.py (`checkpointing`); this query states it again in SQL, and
-- tests/test_job_samples.py checks that both give the same rows.
with

last_busy as (
    select alloc_id, max(ts) filter (where util > 0) as last_busy_ts
    from job_samples
    group by alloc_id
),

dips as (
    select s.alloc_id, s.ts
    from job_samples as s
    join last_busy as b using (alloc_id)
    where s.util = 0 and s.prev_util > 0 and s.ts < b.last_busy_ts
),

spacing as (
    select alloc_id, epoch(ts - lag(ts) over (partition by alloc_id order by ts)) as gap_s
    from dips
),

per_gpu as (
    select
        alloc_id,
        count(*) + 1 as dips,
        (max(gap_s) - min(gap_s)) / nullif(avg(gap_s), 0) as spacing_spread
    from spacing
    where gap_s is not null
    group by alloc_id
),

final as (
    select a.job_id, count(*) as checkpointing_gpus
    from per_gpu as p
    join analyze_alloc as a using (alloc_id)
    where p.dips >= getvariable('checkpoint_min_dips')::bigint
      and p.spacing_spread < getvariable('checkpoint_spacing_tolerance')::double
    group by a.job_id
)

select * from final
