-- grain: one row per cluster x VC x trailing window (1h, 24h, 7d): GPU hours allocated, busy, in
--        idle slots, on never-used GPUs, without data, and held by debugging jobs, inside the
--        window, and the money wasted (idle slots + never used) where `[cost]` priced the GPUs;
--        the figures of `gpuwaste exporter` (docs/exporter.md#windows).
-- sources: job_gpu_usage, job_usage, idle_slots.
-- variables: none.
-- A window ends at its cluster's newest data: the latest allocation end in job_gpu_usage (a
-- running job's allocation ends where the data `gpuwaste analyze` saw ends), not at the wall
-- clock, so a stale warehouse still gives full windows (gpuwaste_warehouse_age_seconds says how
-- stale). Allocated, debugging and idle-slot hours are exact (intervals clipped to the window);
-- an allocation's never-used and no-data seconds count in proportion to its overlap with the
-- window; busy is the rest of the allocated time.
-- GPU hours are slice-weighted as in job_gpu_usage (docs/analyses.md#mig-instances): a wall
-- second of an allocation counts `gpu_weight` GPU seconds (1 for a whole GPU, 1/7 for a
-- `1g.10gb`, less when shared). Money: each allocation's price per GPU second is its
-- gpu_cost / alloc_s (null without a price), so the money of the idle and never-used seconds
-- inside a window is those GPU seconds x that price; `wasted_money` is null for a VC none of
-- whose allocations has a price.
-- One scan per table: each row's overlap with the three windows is computed side by side
-- (`*_1h`, `*_24h`, `*_7d`), summed per VC, then unpivoted.
with

as_of as (  -- in microseconds since the epoch: interval arithmetic on timestamps is slower
    select cluster, epoch_us(max(end_ts)) as hi from job_gpu_usage group by cluster
),

gpus as (
    select
        g.cluster, coalesce(j.vc, '(none)') as vc, j.is_debug,
        g.job_id, g.attempt, g.host, g.gpu, g.gpu_instance,
        epoch_us(g.start_ts) as s, epoch_us(g.end_ts) as e, a.hi,
        coalesce(g.gpu_weight, 1.0) as w,
        g.gpu_cost / g.alloc_s as price_s,
        g.missing_s / g.alloc_s as missing_share,
        g.never_used_s / g.alloc_s as never_used_share
    from job_gpu_usage as g
    join as_of as a using (cluster)
    join job_usage as j on j.cluster = g.cluster and j.job_id = g.job_id
    where g.alloc_s > 0 and epoch_us(g.end_ts) > a.hi - 604800e6
),

gpu_overlap as (
    select
        cluster, vc, is_debug, missing_share, never_used_share, price_s,
        w * greatest(least(e, hi) - greatest(s, hi - 3600e6), 0) / 1e6 as in_1h,
        w * greatest(least(e, hi) - greatest(s, hi - 86400e6), 0) / 1e6 as in_24h,
        w * greatest(least(e, hi) - greatest(s, hi - 604800e6), 0) / 1e6 as in_7d
    from gpus
),

vc_gpu as (
    select
        cluster, vc,
        sum(in_1h) as alloc_1h, sum(in_24h) as alloc_24h, sum(in_7d) as alloc_7d,
        sum(in_1h * missing_share) as missing_1h, sum(in_24h * missing_share) as missing_24h,
        sum(in_7d * missing_share) as missing_7d,
        sum(in_1h * never_used_share) as never_1h, sum(in_24h * never_used_share) as never_24h,
        sum(in_7d * never_used_share) as never_7d,
        coalesce(sum(in_1h) filter (where is_debug), 0) as debug_1h,
        coalesce(sum(in_24h) filter (where is_debug), 0) as debug_24h,
        coalesce(sum(in_7d) filter (where is_debug), 0) as debug_7d,
        sum(in_1h * never_used_share * price_s) as never_money_1h,
        sum(in_24h * never_used_share * price_s) as never_money_24h,
        sum(in_7d * never_used_share * price_s) as never_money_7d,
        count(price_s) > 0 as priced
    from gpu_overlap
    group by all
),

slots as (  -- each idle slot with its allocation's weight and price (the slot lies inside it)
    select
        g.cluster, g.vc, g.w, g.price_s,
        epoch_us(s.start_ts) as s, epoch_us(s.end_ts) as e, g.hi
    from idle_slots as s
    join gpus as g
        on g.cluster = s.cluster and g.job_id = s.job_id and g.attempt = s.attempt
        and g.host = s.host and g.gpu = s.gpu
        and g.gpu_instance is not distinct from s.gpu_instance
    where epoch_us(s.end_ts) > g.hi - 604800e6
),

slot_overlap as (
    select
        cluster, vc, price_s,
        w * greatest(least(e, hi) - greatest(s, hi - 3600e6), 0) / 1e6 as in_1h,
        w * greatest(least(e, hi) - greatest(s, hi - 86400e6), 0) / 1e6 as in_24h,
        w * greatest(least(e, hi) - greatest(s, hi - 604800e6), 0) / 1e6 as in_7d
    from slots
),

vc_idle as (
    select
        cluster, vc,
        sum(in_1h) as idle_1h, sum(in_24h) as idle_24h, sum(in_7d) as idle_7d,
        coalesce(sum(in_1h * price_s), 0) as idle_money_1h,
        coalesce(sum(in_24h * price_s), 0) as idle_money_24h,
        coalesce(sum(in_7d * price_s), 0) as idle_money_7d
    from slot_overlap
    group by all
),

vc as (
    select
        g.*,
        coalesce(i.idle_1h, 0) as idle_1h, coalesce(i.idle_24h, 0) as idle_24h,
        coalesce(i.idle_7d, 0) as idle_7d,
        case when g.priced then coalesce(g.never_money_1h, 0) + coalesce(i.idle_money_1h, 0) end
            as money_1h,
        case when g.priced then coalesce(g.never_money_24h, 0) + coalesce(i.idle_money_24h, 0) end
            as money_24h,
        case when g.priced then coalesce(g.never_money_7d, 0) + coalesce(i.idle_money_7d, 0) end
            as money_7d
    from vc_gpu as g
    left join vc_idle as i using (cluster, vc)
),

windows as (
    select cluster, vc, '1h' as "window", alloc_1h as alloc_s, idle_1h as idle_s,
           never_1h as never_s, missing_1h as missing_s, debug_1h as debug_s, money_1h as money
    from vc
    union all
    select cluster, vc, '24h', alloc_24h, idle_24h, never_24h, missing_24h, debug_24h, money_24h
    from vc
    union all
    select cluster, vc, '7d', alloc_7d, idle_7d, never_7d, missing_7d, debug_7d, money_7d
    from vc
),

final as (
    select
        cluster, vc, "window",
        alloc_s / 3600 as allocated_gpu_h,
        greatest(alloc_s - idle_s - never_s - missing_s, 0) / 3600 as busy_gpu_h,
        idle_s / 3600 as idle_slot_gpu_h,
        never_s / 3600 as never_used_gpu_h,
        missing_s / 3600 as missing_gpu_h,
        debug_s / 3600 as debug_gpu_h,
        money as wasted_money
    from windows
    order by cluster, vc, "window"
)

select * from final
