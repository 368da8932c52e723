-- grain: one row per cluster x holder of idle GPUs, a user (waste_by = 'user') or a VC ('vc'),
--        behind whose allocated idle GPUs some job waited in the period [period_start,
--        period_end): others_waited_gpu_h, others_waits, own_blocked_gpu_h, own_waits.
-- sources: queue_idle_overlap.
-- variables: waste_by ('user' | 'vc'), cluster (null: every cluster), vc (null: every VC),
--            period_start, period_end (timestamptz; null: all time).
-- The one home of "waiting behind idle GPUs" per holder (docs/definitions.md#waiting-behind-idle-gpus):
-- `report --by user|vc` joins it to sql/reports/waste_by.sql's rows, `notify`'s digests read it
-- for their window.
-- others_waited_gpu_h, others_waits: the GPU hours other users' jobs waited while this user's
-- (VC's) GPUs were allocated and idle (queue_idle_overlap's blocked_gpu_s) and how many of
-- their waits (those it kept waiting: blocked_gpu_s > 0); a wait counts whole when it overlaps
-- the period. own_blocked_gpu_h, own_waits: the GPU hours this user's own jobs waited while
-- their own idle GPUs could have run them (same_user), and how many of those waits; per VC, the
-- same over the VC's holders (same_user too, not same_vc: a colleague's wait behind the VC's
-- idle GPUs is already among others' waits), so a VC's two figures are its users' and add up
-- without overlap.
with

final as (
    select
        cluster,
        case getvariable('waste_by') when 'user' then holder_user else holder_vc end as who,
        sum(blocked_gpu_s) filter (where not same_user) / 3600 as others_waited_gpu_h,
        count(distinct (job_id, attempt)) filter (where not same_user and blocked_gpu_s > 0)
            as others_waits,
        sum(blocked_gpu_s) filter (where same_user) / 3600 as own_blocked_gpu_h,
        count(distinct (job_id, attempt)) filter (where same_user and blocked_gpu_s > 0)
            as own_waits
    from queue_idle_overlap
    where getvariable('waste_by') in ('user', 'vc')
      and (getvariable('cluster') is null or cluster = getvariable('cluster'))
      and (getvariable('vc') is null or holder_vc = getvariable('vc'))
      and (getvariable('period_start') is null or wait_end > getvariable('period_start')::timestamptz)
      and (getvariable('period_end') is null or wait_start < getvariable('period_end')::timestamptz)
    group by all
)

select * from final
