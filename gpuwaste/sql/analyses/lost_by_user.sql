-- grain: one row per VC (and '(all)') x GPU model of the job (and '(all)') x user: the user's
--        jobs, their GPU hours and those lost to idle slots and never-used GPUs, and with
--        `[cost]` prices the money.
-- sources: job_usage.
-- variables: cluster, all_vcs, all_models.
-- The sums the dashboard's Overview shows over every job of a view without a period, size or
-- state filter (its job and user counts, top users, money per VC), summed once by analyze
-- instead of over every job at each visit; any VC and model selection and a user filter read
-- its rows (a job has one VC, one model and one user, so the rows of a selection add up).
-- Money is null where no job of the row is priced, as a sum over job_usage's costs is.
-- The rows of VC / model '(all)' are the groups of `cube(vc, gpu_model)` that roll a column
-- up, labelled with the variables all_vcs and all_models.
with

jobs as (
    select
        coalesce(vc, '(none)') as vc, gpu_model, "user", gpu_s, idle_slot_gpu_s,
        never_used_gpu_s, gpu_cost, lost_cost
    from job_usage
    where cluster = getvariable('cluster')
),

final as (
    select
        if(grouping(vc) = 1, getvariable('all_vcs'), vc) as vc,
        if(grouping(gpu_model) = 1, getvariable('all_models'), gpu_model) as gpu_model,
        "user",
        count(*) as jobs,
        sum(gpu_s) / 3600 as gpu_h,
        sum(idle_slot_gpu_s) / 3600 as idle_slot_gpu_h,
        sum(never_used_gpu_s) / 3600 as never_used_gpu_h,
        sum(idle_slot_gpu_s + never_used_gpu_s) / 3600 as lost_gpu_h,
        sum(gpu_cost) as cost,
        sum(lost_cost) as lost_cost
    from jobs
    group by "user", cube(vc, gpu_model)
)

select * from final
