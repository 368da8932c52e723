-- grain: one row per span of waiting pieces (distinct x0, x1 of queue_wait_pieces: the pieces of
--        many stretches of one class share one, cut at the same changes of occupancy), numbered
--        (s, x0, x1), x holder of idle GPUs (h, staging/queue_idle_holders.sql) with idle
--        GPU-seconds in it: those, in whole micro-GPU-seconds (idle_us; some rows are 0).
--        docs/definitions.md#waiting-behind-idle-gpus.
-- sources: queue_wait_pieces, queue_idle_holders (staging).
-- variables: none (its sources are one cluster's).
-- Read by queue_idle_overlap.sql, which sums them per stretch and holder: a holder's idle
-- GPU-seconds in a piece are looked up once per span, not once per stretch x holder x piece.
-- Its own query (a temp table that `gpuwaste analyze` makes first, registry.STAGING_TABLES), so
-- that the reader's query does not hold these lookups' intermediate rows as it sums them.
with

holder_segments as (select h, ts, next_ts, gpus, before_s from queue_idle_holders),

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

-- the spans numbered, and the holders with idle GPUs in some UTC hour of each (candidates)
spans as (
    select row_number() over (order by x0, x1) as s, x0, x1
    from (select distinct x0, x1 from queue_wait_pieces where x1 > x0)
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
-- in whole micro-GPU-seconds, so that the reader's sums are exact (the same whatever order the
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
        c.s, c.x0, c.x1, c.h,
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
        s, x0, x1, h,
        round(
            (
                (before_s + gpus * ((epoch_us(x1) - epoch_us(ts)) / 1e6))
                - (before_s + gpus * ((epoch_us(x0) - epoch_us(ts)) / 1e6))
            ) * 1e6
        )::bigint as idle_us
    from span_start
    where ts is not null and (next_ts is null or next_ts > x1) and gpus <> 0
),

-- in span order: the reader's sums over the pieces of each span, joined to these rows, take
-- fewer CPU seconds than the sort costs here (bench/RESULTS.md, issue #45's analyses)
final as (select * from span_idle order by s)

select * from final
