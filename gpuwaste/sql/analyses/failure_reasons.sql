-- grain: one row per VC (and '(all)') x GPU model (and '(all)') x failure reason (and 'all')
--        [Philly §4.2, Table 7]: its sources (IF infrastructure, AE AI engine, U user), failed
--        attempts (trials), jobs and users; runtime to failure (RTF) 50th/90th/95th percentiles
--        and its share of all failed attempts' runtime; trials by GPU demand (1, 2-4, >4);
--        RTF x demand (GPU time burned) and its share; how often the reason repeats per job
--        and per user.
-- sources: failure_attempts.
-- variables: cluster, all_vcs, all_models.
-- Repetition per job = trials / jobs with the reason (the study's 2.3x), per user = trials /
-- users with it (38.8x); on the 'all' row: trials / distinct (job, reason) pairs, and / (user,
-- reason) pairs, i.e. how often a reason repeats, over every reason.
-- The rows of VC / model '(all)' are the groups of `cube(vc, gpu_model)` over the attempts' own
-- VC and model, labelled with the variables all_vcs and all_models (ROLLUP_LABELS in
-- gpuwaste/warehouse/results.py, set by whatever runs the summaries).
with

attempts as (
    select vc, gpu_model, job_id, user, reason, sources, runtime_s, gpus, gpu_s
    from failure_attempts
    where cluster = getvariable('cluster')
),

-- each attempt under its reason, and again under 'all'
grouped as (
    select *, reason as grp from attempts
    union all
    select *, 'all' as grp from attempts
),

both_ as (
    select
        if(grouping(vc) = 1, getvariable('all_vcs'), vc) as vc,
        if(grouping(gpu_model) = 1, getvariable('all_models'), gpu_model) as gpu_model,
        grp as reason, if(grp = 'all', null, max(sources)) as sources,
        count(*) as trials, count(distinct job_id) as jobs, count(distinct user) as users,
        -- one sort per group for the three
        quantile_cont(runtime_s, [0.5, 0.9, 0.95]) as rtf_q,
        sum(runtime_s) as rtf_s,
        count(*) filter (where gpus <= 1) as trials_1gpu,
        count(*) filter (where gpus between 2 and 4) as trials_2_4gpu,
        count(*) filter (where gpus > 4) as trials_gt4gpu,
        sum(gpu_s) as gpu_s
    from grouped
    group by grp, cube(vc, gpu_model)
),

final as (
    select
        vc, gpu_model, reason, sources, trials, jobs, users, rtf_q[1] as rtf_p50_s,
        rtf_q[2] as rtf_p90_s, rtf_q[3] as rtf_p95_s,
        100.0 * rtf_s / nullif(sum(rtf_s) filter (where reason <> 'all')
            over (partition by vc, gpu_model), 0) as rtf_pct,
        trials_1gpu, trials_2_4gpu, trials_gt4gpu, gpu_s / 3600.0 as gpu_h,
        100.0 * gpu_s / nullif(sum(gpu_s) filter (where reason <> 'all')
            over (partition by vc, gpu_model), 0) as rtf_x_demand_pct,
        -- the distinct (job, reason) pairs of a cell are the sum of its reasons' jobs (and
        -- users alike): no distinct aggregate over pairs in every grouping set
        trials / nullif(if(reason = 'all', sum(jobs) filter (where reason <> 'all')
            over (partition by vc, gpu_model)::bigint, jobs), 0) as per_job,
        trials / nullif(if(reason = 'all', sum(users) filter (where reason <> 'all')
            over (partition by vc, gpu_model)::bigint, users), 0) as per_user
    from both_
)

select * from final
