-- grain: one row per waiting stretch (queue_causes with wait_s > 0) x holder (the user and VC
--        of jobs whose allocated GPUs were idle while it waited): the holder's idle GPU-seconds
--        inside the stretch (idle slots and never-used GPUs, slice-weighted), and of them the
--        GPU-seconds that kept it waiting (blocked_gpu_s). docs/definitions.md#waiting-behind-idle-gpus.
-- sources: queue_causes, queue_wait_pieces (staging/queue_wait_pieces.sql: each stretch's
--          pieces of one cause, over job_gpu_usage, job_gpus, job_usage, gpu_samples),
--          queue_idle_holders (staging: the holders' idle GPUs over time, over idle_slots,
--          job_gpu_usage, job_usage), queue_span_idle (staging: their idle GPU-seconds in each
--          span of the pieces).
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

-- the holders (staging/queue_idle_holders.sql: numbered, h) and their idle GPUs from each change
-- on (holder_segments)
holders as (select distinct h, holder_user, holder_vc, key_order from queue_idle_holders),

holder_segments as (select h, ts, next_ts, gpus, before_s from queue_idle_holders),

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

-- the pieces' spans, numbered as staging/queue_span_idle.sql numbers them (a span where no
-- holder held idle GPUs is not there: nothing to sum in it)
spans as (select distinct s, x0, x1 from queue_span_idle),

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
        join queue_span_idle as i using (s)
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
    select
        o.h, o.holder_user, coalesce(f.d, 0) as d,
        -- its user's demand series, numbered: one per (d, user), however many VCs the user
        -- holds idle GPUs in, looked up by one integer
        dense_rank() over (order by coalesce(f.d, 0), o.holder_user) as u
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
    select o.u, e.ts, round(sum(sum(e.n)) over (partition by o.u order by e.ts), 6) as gpus
    from demand_events as e
    join (select distinct u, d, holder_user from holder_demand) as o
        on o.holder_user = e."user" and o.d = e.d
    group by o.u, e.ts
),

-- a holder's segment meets its demand's segments by number (from the one holding its start
-- to the one holding its end), not by an inequality join
held_waited as (
    select
        i.h, i.u, greatest(i.ts, w.ts) as p0, least(i.next_ts, w.next_ts) as p1,
        i.gpus as idle, w.gpus as waited
    from (
        select
            i.h, i.u, i.ts, i.next_ts, i.gpus, i.d,
            unnest(range(coalesce(d0.idx, 1), coalesce(d1.idx, 0) + 1)) as idx
        from (
            select s.h, s.ts, s.next_ts, s.gpus, o.d, o.u
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
    asof left join user_demand as d on d.u = p.u and d.ts <= p.p0
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
