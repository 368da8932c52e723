-- grain: one row per waiting stretch (queue_causes with wait_s > 0) x holder (the user and VC
--        of jobs whose allocated GPUs were idle while it waited): the holder's idle GPU-seconds
--        inside the stretch (idle slots and never-used GPUs, slice-weighted), and of them the
--        GPU-seconds that kept it waiting (blocked_gpu_s). docs/definitions.md#waiting-behind-idle-gpus.
-- sources: queue_causes, queue_wait_pieces (staging/queue_wait_pieces.sql: each stretch's
--          pieces of one cause, over job_gpu_usage, job_gpus, job_usage, gpu_samples),
--          idle_slots, job_gpu_usage, job_usage.
-- variables: cluster.
-- blocked_gpu_s: idle GPUs kept a job waiting only in the pieces of its wait when there was no
-- room for it that they could have made: capacity and fragmentation (any holder), fair-share
-- (holders in its own VC, whose idle GPUs held its quota); in an `other` piece room was there,
-- and nothing counts. At each moment a holder's idle GPUs can serve at most as many GPUs as
-- other users' jobs so wait for, so the holder's total is the integral over time of
-- least(its idle GPUs, the GPUs other users' jobs wait for in pieces it counts in); it is
-- shared among the stretches in proportion to each stretch's own bound, the sum over its
-- counted pieces of least(the holder's idle GPU-seconds, its GPUs x seconds). A user's own
-- waits behind their own idle GPUs (same_user) share, by the same rule, the integral of
-- least(the holder's idle GPUs, the GPUs the user's own jobs so wait for).
-- Sums are exact: GPU-seconds are summed as whole micro-GPU-seconds (a holder's idle ones in each
-- span of a stretch's pieces, each piece's bound, each segment of its total), so a result does not
-- depend on the order DuckDB's threads add them in.
with

-- the stretches numbered (w), so that the pairs carry a number, not the stretch's columns
waits as (
    select
        row_number() over (order by job_id, attempt) as w,
        job_id, attempt, "user", vc, gpus, wait_start, wait_end, wait_s
    from queue_causes
    where cluster = getvariable('cluster') and wait_s > 0
),

devices as (
    select job_id, attempt, host, gpu, gpu_instance, start_ts, end_ts, never_used,
        coalesce(gpu_weight, 1.0) as w,
        -- a never-used GPU's idle time is its observed time (never_used_s), taken as spread
        -- evenly over its allocation
        coalesce(gpu_weight, 1.0) * never_used_s / nullif(alloc_s, 0) as w_never
    from job_gpu_usage
    where cluster = getvariable('cluster')
),

idle as (
    select i.job_id, i.start_ts, i.end_ts, d.w
    from idle_slots as i
    join devices as d
        on d.job_id = i.job_id and d.attempt = i.attempt and d.host = i.host
        and d.gpu = i.gpu and d.gpu_instance is not distinct from i.gpu_instance
    where i.cluster = getvariable('cluster')
    union all
    select job_id, start_ts, end_ts, w_never
    from devices
    where never_used and end_ts > start_ts and w_never > 0
),

-- a holder without a user meets no stretch (no equality holds on a null user): left out
held_by as (
    select i.*, j."user" as holder_user, coalesce(j.vc, '(none)') as holder_vc
    from idle as i
    join job_usage as j on j.cluster = getvariable('cluster') and j.job_id = i.job_id
    where j."user" is not null
),

-- the holders numbered: h per user and VC; every join and window below is on
-- these numbers, not on the names. Numbered by VC first: a VC's holders are one range of
-- numbers, which a fair-share piece names (piece_spans); key_order is their order in the
-- table's key (final)
holders as (
    select
        holder_user, holder_vc,
        row_number() over (order by holder_vc, holder_user) as h,
        row_number() over (order by holder_user, holder_vc) as key_order
    from (select distinct holder_user, holder_vc from held_by)
),

held as (
    select o.h, i.start_ts, i.end_ts, i.w
    from held_by as i
    join holders as o using (holder_user, holder_vc)
),

-- each holder's idle GPUs from each change on, and its idle GPU-seconds before: a stretch's
-- idle GPU-seconds of a holder are the difference of that integral at its two ends
holder_events as (
    select h, start_ts as ts, w as d from held
    union all
    select h, end_ts, -w from held
),

holder_segments as (
    select
        *,
        coalesce(
            sum(gpus * ((epoch_us(next_ts) - epoch_us(ts)) / 1e6)) over (
                partition by h order by ts rows between unbounded preceding and 1 preceding
            ),
            0
        ) as before_s
    from (
        select
            h, ts,
            lead(ts) over (partition by h order by ts) as next_ts,
            round(sum(sum(d)) over (partition by h order by ts), 6) as gpus
        from holder_events
        group by h, ts
    )
),

-- the holders that held idle GPUs in each UTC hour (candidates for the pieces of that hour;
-- the integral says how much), from the holder's segments with idle GPUs (fewer than its idle
-- intervals)
holder_hours as (
    select distinct h, hour
    from (
        select
            h,
            unnest(
                range(epoch(ts)::bigint // 3600, epoch(coalesce(next_ts, ts))::bigint // 3600 + 1)
            ) as hour
        from holder_segments
        where gpus > 0
    )
),

-- each stretch's pieces (they tile it), and whose idle GPUs count in each: every holder's in a
-- capacity or fragmentation piece (every_vc), its own VC's in a fair-share one (vc_only), none
-- in an `other` one. The job's GPU-seconds in whole micro-GPU-seconds (gpu_us), as below.
wait_pieces as materialized (
    select
        w.w, w."user", w.gpus, p.x0, p.x1,
        round(w.gpus * (epoch_us(p.x1) - epoch_us(p.x0)))::bigint as gpu_us,
        p.cause in ('capacity', 'fragmentation') as every_vc,
        if(p.cause = 'fair-share', w.vc, null) as vc_only
    from queue_wait_pieces as p
    join waits as w using (job_id, attempt)
    where p.x1 > p.x0
),

-- the pieces' spans (the pieces of many stretches of one class share one, cut at the same
-- changes of occupancy), numbered, and the holders with idle GPUs in some UTC hour of each
-- (candidates): a holder's idle GPU-seconds in a piece are looked up once per span, not once
-- per stretch x holder x piece
spans as (
    select row_number() over (order by x0, x1) as s, x0, x1
    from (select distinct x0, x1 from wait_pieces)
),

-- each piece with its span's number and the range of holder numbers h0..h1 whose idle GPUs
-- count in it (every_vc: all; a fair-share piece: its VC's; none: an empty range)
piece_spans as (
    select
        p.w, p.gpu_us, s.s,
        if(p.every_vc, 1, coalesce(v.h0, 1)) as h0,
        if(p.every_vc, (select max(h) from holders), coalesce(v.h1, 0)) as h1
    from wait_pieces as p
    join spans as s using (x0, x1)
    left join (
        select holder_vc, min(h) as h0, max(h) as h1 from holders group by holder_vc
    ) as v on v.holder_vc = p.vc_only
),

span_holders as (
    select distinct s.s, s.x0, s.x1, h.h
    from (
        select
            s, x0, x1,
            unnest(range(epoch(x0)::bigint // 3600, epoch(x1)::bigint // 3600 + 1)) as hour
        from spans
    ) as s
    join holder_hours as h using (hour)
),

-- the holder's idle GPU-seconds in each span: the difference of its integral at the two ends,
-- in whole micro-GPU-seconds, so that the sums below are exact (the same whatever order the
-- threads add them in); a span where it had none is left out. Each end is looked up by ASOF
-- join: the start's for every candidate, the end's only where it is past the segment holding
-- the start (most spans are shorter than a holder's segment; there both ends are in one
-- segment, and one where it held no idle GPU is left out at once)
span_start as materialized (
    select c.s, c.h, c.x0, c.x1, e.ts, e.gpus, e.before_s, e.next_ts
    from span_holders as c
    asof left join holder_segments as e on e.h = c.h and e.ts <= c.x0
),

span_idle as (
    select
        c.s, c.h,
        round(
            (
                coalesce(e1.before_s + e1.gpus * ((epoch_us(c.x1) - epoch_us(e1.ts)) / 1e6), 0)
                - coalesce(c.before_s + c.gpus * ((epoch_us(c.x0) - epoch_us(c.ts)) / 1e6), 0)
            ) * 1e6
        )::bigint as idle_us
    from (select * from span_start where ts is null or next_ts <= x1) as c
    asof left join holder_segments as e1 on e1.h = c.h and e1.ts <= c.x1
    union all
    select
        s, h,
        round(
            (
                (before_s + gpus * ((epoch_us(x1) - epoch_us(ts)) / 1e6))
                - (before_s + gpus * ((epoch_us(x0) - epoch_us(ts)) / 1e6))
            ) * 1e6
        )::bigint as idle_us
    from span_start
    where ts is not null and (next_ts is null or next_ts > x1) and gpus <> 0
),

-- each pair of a stretch and a holder with idle GPU-seconds in it: those (the sum over the
-- stretch's pieces), and its bound: the sum over the pieces the holder counts in of least(its
-- idle GPU-seconds there, the job's GPUs x the piece's seconds)
pairs as (
    select w, h, idle_us / 1e6 as idle_gpu_s, coalesce(bound_us, 0) as bound_us
    from (
        select
            p.w, i.h,
            sum(i.idle_us) as idle_us,
            sum(least(i.idle_us, p.gpu_us)) filter (where i.h between p.h0 and p.h1) as bound_us
        from piece_spans as p
        join span_idle as i using (s)
        where i.idle_us <> 0
        group by p.w, i.h
    )
    where idle_us > 0
),

-- the GPUs waited for in counted pieces, from each change on, per demand d: d = 0 for a holder
-- whose VC no fair-share piece names (capacity and fragmentation pieces only: one series for
-- all of them), else one per such VC (those and its fair-share pieces); and per holder (its
-- user's own: only theirs are looked up)
fair_share_vcs as (
    select vc_only as vc, row_number() over (order by vc_only) as d
    from (select distinct vc_only from wait_pieces where vc_only is not null)
    where vc_only in (select holder_vc from holders)
),

holder_demand as (
    select o.h, o.holder_user, coalesce(f.d, 0) as d
    from holders as o
    left join fair_share_vcs as f on f.vc = o.holder_vc
),

counted as (
    select 0 as d, "user", x0, x1, gpus from wait_pieces where every_vc
    union all
    select f.d, p."user", p.x0, p.x1, p.gpus
    from wait_pieces as p
    join fair_share_vcs as f on p.every_vc or p.vc_only = f.vc
),

demand_events as (
    select d, x0 as ts, "user", gpus as n from counted
    union all
    select d, x1, "user", -gpus from counted
),

demand as (
    select
        d,
        row_number() over (partition by d order by ts) as idx,
        ts,
        lead(ts, 1, 'infinity'::timestamptz) over (partition by d order by ts) as next_ts,
        gpus
    from (
        select d, ts, round(sum(sum(n)) over (partition by d order by ts), 6) as gpus
        from demand_events
        group by d, ts
    )
),

-- per user (a holder looks up its own user's)
user_demand as (
    select d, "user", ts, round(sum(sum(n)) over (partition by d, "user" order by ts), 6) as gpus
    from demand_events
    semi join holder_demand as o on o.holder_user = demand_events."user" and o.d = demand_events.d
    group by d, "user", ts
),

-- a holder's segment meets its demand's segments by number (from the one holding its start
-- to the one holding its end), not by an inequality join
held_waited as (
    select
        i.h, i.d, i.holder_user, greatest(i.ts, w.ts) as p0, least(i.next_ts, w.next_ts) as p1,
        i.gpus as idle, w.gpus as waited
    from (
        select
            i.h, i.ts, i.next_ts, i.gpus, i.d, i.holder_user,
            unnest(range(coalesce(d0.idx, 1), coalesce(d1.idx, 0) + 1)) as idx
        from (
            select s.h, s.ts, s.next_ts, s.gpus, o.d, o.holder_user
            from holder_segments as s
            join holder_demand as o using (h)
            where s.gpus > 0 and s.next_ts is not null
        ) as i
        asof left join demand as d0 on d0.d = i.d and d0.ts <= i.ts
        asof left join demand as d1 on d1.d = i.d and d1.ts < i.next_ts
    ) as i
    join demand as w using (d, idx)
    where w.gpus > 0 and w.ts < i.next_ts and w.next_ts > i.ts
),

-- and, by the same rule, the integral of least(its idle GPUs, the GPUs its own user's jobs
-- waited for in the pieces it counts in): its total over its own user's stretches. Each
-- segment's GPU-seconds in whole micro-GPU-seconds, summed exactly.
holder_total as (
    select
        p.h,
        sum(round(p.s * least(p.idle, p.waited - coalesce(d.gpus, 0)) * 1e6)::bigint)
            filter (where p.waited - coalesce(d.gpus, 0) > 0) / 1e6 as blocked_gpu_s,
        sum(round(p.s * least(p.idle, d.gpus) * 1e6)::bigint)
            filter (where d.gpus > 0) / 1e6 as own_blocked_gpu_s
    from (select *, (epoch_us(p1) - epoch_us(p0)) / 1e6 as s from held_waited) as p
    asof left join user_demand as d
        on d.d = p.d and d."user" = p.holder_user and d.ts <= p.p0
    group by p.h
),

-- each pair's numbers: whose waits they are (same_user) decides which total it shares
pair_rows as materialized (
    select
        p.w, p.h, p.idle_gpu_s, p.bound_us,
        o.holder_user = w."user" as same_user
    from pairs as p
    join waits as w using (w)
    join holders as o using (h)
),

-- each holder's bounds over the stretches of other users and over its own user's, the
-- shares' denominators
bounds as (
    select h, same_user, sum(bound_us) as bound_sum
    from pair_rows
    group by h, same_user
),

shared as (
    select
        p.w, p.h, p.idle_gpu_s, p.same_user,
        coalesce(
            if(p.same_user, t.own_blocked_gpu_s, t.blocked_gpu_s)
                * p.bound_us / nullif(b.bound_sum, 0),
            0
        ) as blocked_gpu_s
    from pair_rows as p
    join bounds as b using (h, same_user)
    left join holder_total as t using (h)
),

final as (
    select
        w.job_id, w.attempt, w."user", w.vc, w.gpus, w.wait_start, w.wait_end, w.wait_s,
        o.holder_user, o.holder_vc,
        o.holder_vc = w.vc as same_vc,
        p.same_user,
        p.idle_gpu_s, p.blocked_gpu_s
    from shared as p
    join waits as w using (w)
    join holders as o using (h)
    -- in the table's key order (job_id, attempt, holder_user, holder_vc), by numbers: the
    -- writer (store.replace_file) finds it sorted and does not sort it by its strings again
    order by w.w, o.key_order
)

select * from final
