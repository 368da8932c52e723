-- grain: one row per job to recompute: the batch it is analyzed in (0, 1, ...).
-- sources: the jobs to recompute (a parquet file named by the variable `dirty`, with the columns
--          of plan/job_fingerprints.sql).
-- variables: dirty (path), batch_days (--batch-days), batch_max_hosts.
-- choice: jobs are grouped by the day they start, batch_days days per group from the first, and
--         within a group by their first host, batch_max_hosts hosts per batch (hosts in name
--         order, so that a batch reads the samples of neighbouring hosts); a job without a host
--         goes with the first hosts of its days, and jobs that never started (no day: they hold
--         no GPU time) come last, in a batch of their own. A batch therefore holds at most
--         batch_max_hosts hosts x batch_days days of jobs, whatever the size of the cluster.
with

jobs as (
    select
        job_id, first_host,
        (first_day - min(first_day) over ()) // getvariable('batch_days')::bigint as day_group
    from read_parquet(getvariable('dirty'))
),

groups as (
    select
        job_id, day_group,
        case
            when first_host is null then 0
            else (dense_rank() over (partition by day_group order by first_host) - 1)
                // getvariable('batch_max_hosts')::bigint
        end as host_group
    from jobs
),

final as (
    select
        (dense_rank() over (order by day_group nulls last, host_group) - 1)::bigint as batch,
        job_id
    from groups
)

select * from final
