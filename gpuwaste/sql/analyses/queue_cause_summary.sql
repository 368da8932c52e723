-- grain: one row per VC (and '(all)') x GPU model (and '(all)') x size class (1, 2-4, 5-8, >8,
--        all) x cause (fair-share, fragmentation, capacity, other) [Philly §3.1, Table 2]:
--        waiting stretches whose cause it is and their share of the class's stretches
--        (occurrences), seconds waited for it and their share of the class's waiting time;
--        beside them, per VC x model x size, the scheduling decisions (starts) and the share
--        that jumped the queue (out-of-order), and whether fair-share was judged (every
--        stretch's VC had a quota). docs/definitions.md#queueing-causes.
-- sources: queue_causes.
-- variables: cluster, all_vcs, all_models.
with

-- the seconds as whole microseconds (exact, as queue_causes measured them): a sum of fractional
-- seconds would depend on the order the threads add them in
stretches as (
    select
        vc, gpu_model, size_class, cause, out_of_order, vc_quota is not null as judged,
        round(wait_s * 1e6)::bigint as wait_us,
        round(fair_share_s * 1e6)::bigint as fair_share_us,
        round(fragmentation_s * 1e6)::bigint as fragmentation_us,
        round(capacity_s * 1e6)::bigint as capacity_us,
        round(other_s * 1e6)::bigint as other_us
    from queue_causes
    where cluster = getvariable('cluster')
),

sized as (
    select * from stretches
    union all select * replace ('all' as size_class) from stretches
),

groups as (
    select
        if(grouping(vc) = 1, getvariable('all_vcs'), vc) as vc,
        if(grouping(gpu_model) = 1, getvariable('all_models'), gpu_model) as gpu_model,
        size_class,
        count(*) as decisions,
        100 * avg(out_of_order::int) as out_of_order_pct,
        count(*) filter (wait_us > 0) as waits,
        sum(wait_us) / 1e6 as wait_s,
        bool_and(judged) filter (wait_us > 0) as fair_share_judged,
        count(*) filter (cause = 'fair-share') as n_fair_share,
        count(*) filter (cause = 'fragmentation') as n_fragmentation,
        count(*) filter (cause = 'capacity') as n_capacity,
        count(*) filter (cause = 'other') as n_other,
        sum(fair_share_us) / 1e6 as s_fair_share,
        sum(fragmentation_us) / 1e6 as s_fragmentation,
        sum(capacity_us) / 1e6 as s_capacity,
        sum(other_us) / 1e6 as s_other
    from sized
    group by size_class, cube(vc, gpu_model)
),

causes as (
    select * from (values
        ('fair-share', 1), ('fragmentation', 2), ('capacity', 3), ('other', 4)
    ) as c(cause, o)
),

final as (
    select
        g.vc, g.gpu_model, g.size_class, c.cause,
        case c.cause
            when 'fair-share' then g.n_fair_share
            when 'fragmentation' then g.n_fragmentation
            when 'capacity' then g.n_capacity
            else g.n_other
        end as stretches,
        100 * stretches / nullif(g.waits, 0) as stretches_pct,
        case c.cause
            when 'fair-share' then g.s_fair_share
            when 'fragmentation' then g.s_fragmentation
            when 'capacity' then g.s_capacity
            else g.s_other
        end as cause_wait_s,
        100 * cause_wait_s / nullif(g.wait_s, 0) as wait_pct,
        g.waits, g.wait_s, g.decisions, g.out_of_order_pct,
        coalesce(g.fair_share_judged, false) as fair_share_judged
    from groups as g
    cross join causes as c
)

select * from final
