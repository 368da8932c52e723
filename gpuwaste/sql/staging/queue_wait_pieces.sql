-- grain: one row per start of a job's attempt (a scheduling decision) x piece of the waiting
--        stretch before it (submission -> first attempt's start; a previous attempt's end ->
--        the next attempt's start): the start's job, class and stretch, and the piece's cause
--        and span (x0, x1); a start that did not wait has one row with a null cause.
--        docs/definitions.md#queueing-causes.
-- sources: job_gpu_usage (allocations of known devices: occupancy, each attempt's GPUs and
--          layout), job_gpus (allocations whose devices no data names), job_usage (submission,
--          user, VC, size class, GPUs), gpu_samples (GPUs seen in telemetry).
-- variables: cluster; as_of (a running allocation without devices ends there; null: left
--            out); vc_quota_names, vc_quota_gpus (varchar[], double[]: [clusters.vc_quotas];
--            null: no quotas, fair-share is not judged).
-- macros: mig_slice_weight (gpuwaste/warehouse/mig.py, analyses/sqlfiles.define_macros).
-- The one cut of waiting stretches into pieces of one cause, read by queue_causes.sql (the
-- causes, the out-of-order starts) and queue_idle_overlap.sql (which pieces idle GPUs kept
-- waiting): the analyses make it the temp view `queue_wait_pieces` before they run
-- (`Analysis.staging` in gpuwaste/analyses/registry.py); `gpuwaste analyze` makes it once, a
-- temp table that both read (`registry.STAGING_TABLES`).
-- Occupancy: every allocation, of known devices (job_gpu_usage, slice-weighted: a MIG
-- allocation occupies its slice's share of its GPU, gpu_weight) or not: a job whose GPU indices
-- no source gave and no telemetry label resolved (Slurm from sacct alone: job_gpus gpu = -1,
-- one row per host of NodeList) holds its GPUs (AllocTRES gres/gpu, job_usage.gpus) spread
-- evenly over the hosts of its attempt (sacct prints the total alone), each at the slice weight
-- of its MIG profile, if any (mig_slice_weight).
-- Capacity, by slice: a host has the GPUs seen on it, in telemetry or in allocations of known
-- devices (a MIG GPU is one GPU, whatever its instances), and at least as many as it held at
-- once (the peak of its occupancy, rounded up to whole GPUs: allocations without devices show
-- a host's GPUs only by their count).
-- A stretch is cut at every change of occupancy into sub-stretches, each classified in this
-- order by the state that holds through it:
--   1. fair-share: quotas are known for the job's VC and the VC held at least its quota;
--   2. capacity: fewer GPUs free in the cluster than the job's GPUs;
--   3. fragmentation: enough GPUs free, but fewer hosts with the job's GPUs per host free than
--      the hosts it ran on (its layout as it finally ran: hosts, the most GPUs on one host);
--   4. other: quota, GPUs and a placement were there (the scheduler's order or latency).
with

tied as (
    select
        job_id, attempt, host, gpu, start_ts, end_ts,
        coalesce(gpu_weight, 1.0) as w
    from job_gpu_usage
    where cluster = getvariable('cluster') and end_ts > start_ts
),

-- the attempts with a host whose devices no data names (none where every GPU is known)
unknown as (
    select distinct job_id, attempt
    from job_gpus
    where cluster = getvariable('cluster') and gpu < 0
),

-- allocations of no known device: each host's share of the job's GPUs (see Occupancy above)
untied as materialized (
    select * exclude (resolved)
    from (
        select
            g.job_id, g.attempt, g.host, -1::smallint as gpu, g.start_ts,
            coalesce(g.end_ts, getvariable('as_of')::timestamptz) as end_ts,
            u.gpus / g.hosts * mig_slice_weight(g.mig_profile) as w,
            -- a host whose devices telemetry labels resolved is counted in tied
            t.job_id is not null as resolved
        from (
            -- each host of each such attempt, and how many hosts the attempt has (all of its
            -- hosts, those with known devices too, share its GPUs)
            select *, count(*) over (partition by job_id, attempt) as hosts
            from (
                select
                    x.job_id, x.attempt, x.host, max(x.mig_profile) as mig_profile,
                    min(x.start_ts) as start_ts,
                    if(bool_or(x.end_ts is null), null, max(x.end_ts)) as end_ts,
                    bool_or(x.gpu < 0) as unknown
                from job_gpus as x
                semi join unknown using (job_id, attempt)
                where x.cluster = getvariable('cluster')
                group by x.job_id, x.attempt, x.host
            )
        ) as g
        join job_usage as u on u.cluster = getvariable('cluster') and u.job_id = g.job_id
        left join (select distinct job_id, attempt, host from tied) as t
            on t.job_id = g.job_id and t.attempt = g.attempt and t.host = g.host
        where g.unknown and u.gpus > 0
    )
    -- one that starts at as_of (the last event of a cluster seen through sacct alone) holds
    -- nothing yet, but its start is a decision
    where not resolved and end_ts >= start_ts
),

alloc as (
    select * from tied
    union all
    select * from untied
),

job_vc as (
    select job_id, coalesce(vc, '(none)') as vc
    from job_usage
    where cluster = getvariable('cluster')
),

-- the jobs that can wait: those with a submit time (every job occupies its GPUs: job_vc)
job as (
    select job_id, "user", coalesce(vc, '(none)') as vc, gpu_model, size_class, submit_ts
    from job_usage
    where cluster = getvariable('cluster') and submit_ts is not null
),

quotas as (
    select
        unnest(getvariable('vc_quota_names')::varchar[]) as vc,
        unnest(getvariable('vc_quota_gpus')::double[]) as quota
),

seen as (
    select host, count(*)::double as gpus
    from (
        select distinct host, gpu from gpu_samples where cluster = getvariable('cluster')
        union
        select distinct host, gpu from tied
    )
    group by host
),

-- the most a host held at once, where allocations without devices say more than its devices
-- seen can (elsewhere the devices seen bound it)
peak as (
    select host, ceil(max(held)) as gpus
    from (
        select host, round(sum(sum(d)) over (partition by host order by ts), 6) as held
        from (
            select host, start_ts as ts, w as d from alloc
            union all
            select host, end_ts, -w from alloc
        )
        where host in (select host from untied)
        group by host, ts
    )
    group by host
),

capacity as (
    select host, greatest(coalesce(s.gpus, 0), coalesce(p.gpus, 0)) as gpus
    from seen as s
    full join peak as p using (host)
),

total as (select sum(gpus) as gpus from capacity),

host_alloc as (
    select job_id, attempt, host, sum(w) as gpus from alloc group by all
),

attempts as (
    select
        job_id, attempt,
        min(start_ts) as start_ts, max(end_ts) as end_ts,
        round(sum(gpus), 6) as gpus, count(*) as hosts, round(max(gpus), 6) as per_host
    from (
        select h.*, a.start_ts, a.end_ts
        from host_alloc as h
        join (
            select job_id, attempt, host, min(start_ts) as start_ts, max(end_ts) as end_ts
            from alloc group by all
        ) as a using (job_id, attempt, host)
    )
    group by all
),

starts as (
    select
        a.job_id, a.attempt, j."user", j.vc, j.gpu_model, j.size_class, j.submit_ts,
        a.gpus, a.hosts, a.per_host, q.quota,
        coalesce(
            lag(a.end_ts) over (partition by a.job_id order by a.attempt), j.submit_ts
        ) as wait_start,
        a.start_ts as wait_end
    from attempts as a
    join job as j using (job_id)
    left join quotas as q using (vc)
),

waits as (select * from starts where wait_end > wait_start),

events as (
    select a.start_ts as ts, a.host, j.vc, a.w as d from alloc as a join job_vc as j using (job_id)
    union all
    select a.end_ts, a.host, j.vc, -a.w from alloc as a join job_vc as j using (job_id)
),

-- occupancy of the cluster from each change on, until the next
cluster_used as (
    select ts, lead(ts, 1, 'infinity'::timestamptz) over (order by ts) as next_ts, used
    from (
        select timestamptz '-infinity' as ts, 0.0 as used
        union all
        select ts, round(sum(sum(d)) over (order by ts), 6) from events group by ts
    )
),

-- only a VC with a quota is looked up (fair-share is judged for it alone)
vc_used as (
    select vc, ts, round(sum(sum(d)) over (partition by vc order by ts), 6) as used
    from events
    where vc in (select vc from quotas)
    group by vc, ts
),

-- each host's free GPUs from each change on (the hosts numbered: the windows partition by an
-- integer)
host_free as (
    select
        f.n, f.ts, f.free,
        lag(f.free, 1, f.gpus) over (partition by f.n order by f.ts) as prev_free
    from (
        select
            c.n, ts, c.gpus,
            round(c.gpus - sum(sum(d)) over (partition by c.n order by ts), 6) as free
        from events
        join (select *, row_number() over (order by host) as n from capacity) as c using (host)
        group by c.n, ts, c.gpus
    ) as f
),

per_host_needs as (select distinct per_host as g from waits),

-- hosts with at least g GPUs free, from each change on
hosts_with as (
    select g, ts, sum(sum(d)) over (partition by g order by ts) as hosts
    from (
        select n.g, timestamptz '-infinity' as ts, count(*)::bigint as d
        from per_host_needs as n join capacity as c on c.gpus >= n.g
        group by n.g
        union all
        select n.g, h.ts, (h.free >= n.g)::int - (h.prev_free >= n.g)::int
        from host_free as h cross join per_host_needs as n
        where (h.free >= n.g) <> (h.prev_free >= n.g)
    )
    group by g, ts
),

-- The cause depends on the job only through its class (VC with its quota, GPUs, hosts, GPUs per
-- host; the VC only where it has a quota): it is judged once per class and change of
-- occupancy, over the spans in which some job of the class waited, and kept as runs of one
-- cause (few), which each stretch then meets.
waits_k as (
    select
        w.*,
        dense_rank() over (
            order by if(quota is null, null, vc), quota, gpus, hosts, per_host
        ) as k
    from waits as w
),

classes as (
    select distinct k, if(quota is null, null, vc) as vc, quota, gpus, hosts, per_host
    from waits_k
),

-- the spans in which some job of the class waited (overlapping stretches merged). Each
-- distinct stretch once: the two windows' orders are then total; equal stretches (jobs of one
-- class submitted and started together) could come in another order in each, and a stretch
-- numbered into the span before its own would stretch that span over it.
spans as (
    select k, min(wait_start) as a0, max(wait_end) as a1
    from (
        select k, wait_start, wait_end,
            sum(new_span::int) over (order by k, wait_start, wait_end rows unbounded preceding)
                as span
        from (
            select k, wait_start, wait_end,
                wait_start >= coalesce(
                    max(wait_end) over (
                        partition by k order by wait_start, wait_end
                        rows between unbounded preceding and 1 preceding
                    ),
                    '-infinity'::timestamptz
                ) as new_span
            from (select distinct k, wait_start, wait_end from waits_k)
        )
    )
    group by k, span
),

-- the occupancy segments numbered, so that a span meets its segments by number (a range of
-- numbers, from the segment holding its start to the one holding its end) rather than by an
-- inequality join
segments as (
    select row_number() over (order by ts) as idx, ts, next_ts, used from cluster_used
),

span_segments as (
    select s.k, s.a0, s.a1, unnest(range(s.i0, s.i1 + 1)) as idx
    from (
        select s.k, s.a0, s.a1, u0.idx as i0, u1.idx as i1
        from spans as s
        asof join segments as u0 on u0.ts <= s.a0
        asof join segments as u1 on u1.ts < s.a1
    ) as s
),

pieces as (
    select
        c.*,
        greatest(s.a0, u.ts) as s0,
        least(s.a1, u.next_ts) as s1,
        -- rounded as the occupancy is: 3 - 0.857143 is 0.14285699999999998, and a 1/7 slice
        -- (0.142857) would not fit the 1/7 free
        round(t.gpus - u.used, 6) as free
    from span_segments as s
    join classes as c using (k)
    join segments as u using (idx)
    cross join total as t
),

-- each piece's VC and GPUs judged first; the hosts with its GPUs per host free are looked up
-- only for the pieces they decide (a piece that waited for quota or GPUs needs none), and a
-- VC's occupancy only for a class with a quota
judged as (
    select p.*, coalesce(v.used, 0) >= p.quota as fair
    from pieces as p
    asof left join vc_used as v on v.vc = p.vc and v.ts <= p.s0
    where p.quota is not null
    union all
    select p.*, false as fair
    from pieces as p
    where p.quota is null
),

classified as (
    select k, s0, s1, if(fair, 'fair-share', 'capacity') as cause
    from judged
    where fair or coalesce(free < gpus, false)
    union all
    select
        p.k, p.s0, p.s1,
        if(coalesce(h.hosts, 0) < p.hosts, 'fragmentation', 'other') as cause
    from judged as p
    asof left join hosts_with as h on h.g = p.per_host and h.ts <= p.s0
    where not (p.fair or coalesce(p.free < p.gpus, false))
),

-- consecutive pieces of one cause merged into a run: the pieces that start a run (not
-- contiguous with the one before, or of another cause) and those that end one are few, and
-- a start's run ends at itself or at the next of them
runs as (
    select k, cause, s0 as r0, if(is_end, s1, lead(s1) over (partition by k order by s0)) as r1
    from (
        select k, cause, s0, s1,
            s0 <> coalesce(lag(s1) over w, s0 - interval 1 second)
                or cause <> coalesce(lag(cause) over w, '') as is_start,
            coalesce(lead(s0) over w <> s1 or lead(cause) over w <> cause, true) as is_end
        from classified
        window w as (partition by k order by s0)
    )
    where is_start or is_end
    qualify is_start
),

-- each stretch's part of each run of its class
stretch_runs as (
    select
        w.job_id, w.attempt, r.cause,
        greatest(w.wait_start, r.r0) as x0, least(w.wait_end, r.r1) as x1
    from waits_k as w
    join runs as r on r.k = w.k and r.r0 < w.wait_end and r.r1 > w.wait_start
),

final as (
    select s.*, r.cause, r.x0, r.x1
    from starts as s
    left join stretch_runs as r using (job_id, attempt)
)

select * from final
