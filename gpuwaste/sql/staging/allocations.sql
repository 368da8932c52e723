-- grain: one row per job x attempt x allocated GPU of the jobs being analyzed, with the
--        interval [start_ts, end_ts) it was held (a running job: see below), numbered by
--        alloc_id so that the per-sample pass carries one integer, not five keys.
-- sources: alloc_intervals (staging/alloc_intervals.sql: the batch's intervals and those of
--          their possible sharers, from plan/shared_spans.sql, before the bound).
-- variables: as_of; host_newest (a MAP host -> newest sample, staging/host_newest.sql;
--            NULL: no bound), sampling_interval_s, fallback_interval_s.
-- choice: a running allocation (no end in job_gpus or jobs) ends at `as_of`, the watermark of
-- the cluster's data, or earlier at its host's newest sample + one sampling interval
-- (`sampling_interval_s`, else `fallback_interval_s`) when its host has a sample since the
-- allocation started: a host's clock bounds its own jobs only, so one host whose clock is
-- ahead, or data of one host that arrives later, never lengthens another host's jobs. An
-- allocation whose host sent nothing since it started keeps `as_of` (all of it without data).
-- A device is a whole GPU (gpu_instance null) or a MIG instance of one; gpu_weight is its
-- share of one GPU's time: a profile's compute slices / the GPU's (slice_weight, from
-- staging/alloc_intervals.sql: gpuwaste/warehouse/mig.py's mig_slice_weight), 1 for a whole
-- GPU (docs/analyses.md#mig-instances); tests/test_mig.py checks it against Profile.weight.
-- A shared device (allocations overlapping on it: time-slicing, MPS) divides its time:
-- over each stretch, each of the k allocations holding it gets 1/k; gpu_weight is then
-- also multiplied by the allocation's device share = (its seconds / k, summed) / its
-- seconds (docs/analyses.md#shared-gpus). Sharers are found among all the cluster's
-- allocations of known devices, not only this batch's: among those of shared_spans, which lists,
-- once per run, every one that overlaps another on its device (an allocation that overlaps no
-- other is not in it, and keeps its whole time). A sharer is bounded as the batch's own are,
-- in the one `bounded` step below: a running sharer whose host's data are behind shares its
-- device only up to its bounded end, so a device's time is counted once, by its holders.
-- A GPU index of -1 (Slurm without GPU indices) is kept here; resolve_unknown_gpus.sql turns it
-- into the GPUs whose samples carry the job's label.
with

bounded as (
    -- a running allocation (the batch's own or a sharer) ends at its host's newest sample + one
    -- sampling interval, when its host has a sample since it started (and that is before `as_of`)
    select
        * exclude (end_ts, running),
        case when running and getvariable('host_newest')[host]::timestamptz >= start_ts
            then least(
                getvariable('as_of')::timestamptz,
                getvariable('host_newest')[host]::timestamptz + to_microseconds((1e6 * coalesce(
                    getvariable('sampling_interval_s'), getvariable('fallback_interval_s')
                ))::bigint)
            )
            else end_ts
        end as end_ts
    from alloc_intervals
),

held as (
    select *, concat_ws('|', job_id, attempt, host, gpu, coalesce(gpu_instance, -1)) as a_key
    from bounded
    where own
),

sharers as (
    select host, gpu, gpu_instance, start_ts, end_ts
    from bounded
    where not own
),

overlapping as (
    -- each allocation with the part of every allocation of its device inside it (itself too)
    select
        a.a_key,
        greatest(o.start_ts, a.start_ts) as o_start,
        least(o.end_ts, a.end_ts) as o_end
    from held as a
    join sharers as o
      on o.host = a.host and o.gpu = a.gpu and o.gpu_instance is not distinct from a.gpu_instance
     and o.start_ts < a.end_ts and o.end_ts > a.start_ts
    where a.gpu >= 0
),

shared as (
    select a_key from overlapping group by a_key having count(*) > 1
),

pieces as (
    -- the stretches of a shared allocation between consecutive starts and ends of its sharers
    select a_key, t as p_start, lead(t) over (partition by a_key order by t) as p_end
    from (
        select distinct a_key, t
        from (
            select o.a_key, unnest([o.o_start, o.o_end]) as t
            from overlapping as o
            semi join shared as s on s.a_key = o.a_key
        )
    )
),

device_share as (
    -- seconds / k over each stretch held by k allocations, summed per allocation
    select a_key, sum(share_s) as share_s
    from (
        select p.a_key, epoch(p.p_end - p.p_start) / count(*) as share_s
        from pieces as p
        join overlapping as o
          on o.a_key = p.a_key and o.o_start <= p.p_start and o.o_end >= p.p_end
        where p.p_end is not null
        group by p.a_key, p.p_start, p.p_end
    )
    group by a_key
),

final as (
    select
        row_number() over (order by job_id, attempt, host, gpu, gpu_instance) as alloc_id,
        job_id, attempt, host, gpu, gpu_instance, mig_profile, gpu_model,
        h.slice_weight * coalesce(d.share_s / epoch(h.end_ts - h.start_ts), 1.0) as gpu_weight,
        start_ts, end_ts
    from held as h
    left join device_share as d using (a_key)
)

select * from final
