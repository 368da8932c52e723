-- grain: one row per start of a job's attempt (a scheduling decision) [Philly §3.1, Table 2]:
--        the waiting stretch before it (submission -> first attempt's start; a previous
--        attempt's end -> the next attempt's start), its seconds by cause and its cause (the
--        cause of most of its seconds; null when it did not wait), and whether the start
--        jumped the queue (out_of_order). docs/definitions.md#queueing-causes.
-- sources: queue_wait_pieces (staging/queue_wait_pieces.sql: the stretches cut into pieces of one
--          cause, and how; over job_gpu_usage, job_gpus, job_usage, gpu_samples).
-- variables: cluster; vc_quota_names, vc_quota_gpus (varchar[], double[]: [clusters.vc_quotas];
--            null: no quotas, fair-share is not judged).
with

-- read once (the view is the staging query, not a table)
pieces as materialized (select * from queue_wait_pieces),

starts as (
    select distinct
        job_id, attempt, "user", vc, gpu_model, size_class, submit_ts, gpus, hosts, per_host,
        quota, wait_start, wait_end
    from pieces
),

-- each stretch's part of each run of its class (read by the causes and the out-of-order starts)
stretch_runs as (
    select job_id, attempt, submit_ts, gpus, per_host, cause, x0, x1
    from pieces
    where cause is not null
),

by_stretch as (
    select
        job_id, attempt,
        sum(s) filter (cause = 'fair-share') as fair_share_s,
        sum(s) filter (cause = 'fragmentation') as fragmentation_s,
        sum(s) filter (cause = 'capacity') as capacity_s,
        sum(s) filter (cause = 'other') as other_s,
        -- ties: the first in the classification order
        first(
            cause order by s desc,
            list_position(['fair-share', 'capacity', 'fragmentation', 'other'], cause)
        ) as cause
    from (
        -- whole microseconds: a sum of fractional seconds would depend on the order the
        -- threads add them in (and could tip a tie between two causes)
        select job_id, attempt, cause, sum(epoch_us(x1) - epoch_us(x0)) / 1e6 as s
        from stretch_runs
        group by all
    )
    group by all
),

-- a start jumped the queue when, as it started, an earlier-submitted job that its GPUs would
-- have fitted (no more GPUs, no more per host) waited for a reason other than fair-share.
-- The times each job waited for a cause other than fair-share are cut into 10-minute buckets,
-- and a start meets the waits of its own bucket and of each class (GPUs, per host) it fits by
-- an equi-join (an inequality join over every wait is far slower; hours and no class met ten
-- times as many pairs). The same job's earlier wait is never earlier-submitted.
waiting_then as (
    select submit_ts, gpus, per_host, x0, x1 from stretch_runs where cause <> 'fair-share'
),

waiting_buckets as (
    select *, unnest(range(epoch(x0)::bigint // 600, epoch(x1)::bigint // 600 + 1)) as bucket
    from waiting_then
),

fitting as (
    select distinct gpus, per_host from waiting_then
),

start_fits as (
    select
        b.job_id, b.attempt, b.submit_ts, b.wait_end, f.gpus, f.per_host,
        epoch(b.wait_end)::bigint // 600 as bucket
    from starts as b
    join fitting as f on f.gpus <= b.gpus and f.per_host <= b.per_host
),

jumped as (
    select distinct b.job_id, b.attempt
    from start_fits as b
    join waiting_buckets as a
        on a.bucket = b.bucket and a.gpus = b.gpus and a.per_host = b.per_host
        and a.x0 <= b.wait_end and a.x1 > b.wait_end
        and a.submit_ts < b.submit_ts
),

final as (
    select
        s.job_id, s.attempt, s."user", s.vc, s.gpu_model, s.size_class,
        s.gpus, s.hosts, s.per_host, s.quota as vc_quota,
        s.wait_start, s.wait_end,
        greatest(epoch(s.wait_end - s.wait_start), 0) as wait_s,
        coalesce(b.fair_share_s, 0) as fair_share_s,
        coalesce(b.fragmentation_s, 0) as fragmentation_s,
        coalesce(b.capacity_s, 0) as capacity_s,
        coalesce(b.other_s, 0) as other_s,
        b.cause,
        j.job_id is not null as out_of_order
    from starts as s
    left join by_stretch as b using (job_id, attempt)
    left join jumped as j using (job_id, attempt)
)

select * from final
