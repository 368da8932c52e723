-- grain: one row per job of the batch with coarse-busy samples: the evidence of "looks busy"
--        (#44, docs/definitions.md#looks-busy), arm by arm (see below).
-- sources: analyze_alloc (staging/allocations.sql), alloc_models (staging/alloc_models.sql: the
--          device's model), gpu_samples.
-- TEST ORACLE, not product code: `gpuwaste analyze` never runs it. The definition is
-- gpuwaste/analyses/looks_busy.py, over the per-job pass's samples; this query states it again
-- in SQL over gpu_samples (what analyze ran before the evidence moved into the pass), and
-- tests/test_looks_busy_generated.py checks that both give the same rows. Its samples are
-- those with a utilization, as the pass's (a source giving gpu_util gives util with it).
-- Of the job's samples that carry the coarse busy metric (`gpu_util`: DCGM GPU_UTIL,
-- nvidia-smi's utilization), how many read it at or above `busy_coarse_min_pct` while the GPU
-- did almost nothing, by one of two arms:
--   * fine: the fine activity (the larger of SM and tensor-pipe activity) is at or under
--     `busy_fine_max_pct`;
--   * power, for a sample without a fine metric: its power is at or under
--     `busy_power_max_idle_x` times the idle power of the device's model measured in the data
--     (analyses/idle_power.sql, handed over as idle_power_models / idle_power_watts);
-- their means beside. (job_usage.sql decides looks_busy from it.)
-- variables: cluster, date_lo, date_hi, host_lo, host_hi, busy_coarse_min_pct,
--            busy_fine_max_pct, busy_power_max_idle_x, idle_power_models, idle_power_watts
--            (unset: no model has an idle power, no power arm).
-- A sample with a fine metric is judged by it alone (the better evidence: low power with real SM
-- activity is light work, not a loop); one with neither a fine metric nor power and an idle
-- power for its model is no evidence: it counts in `coarse_samples` only. A MIG instance has no
-- power of its own (its series repeat the parent's). Samples are counted, not weighted by time:
-- one exporter scrapes a job's GPUs at one interval.
with

allocs as (
    select a.job_id, a.host, a.gpu, a.gpu_instance, a.start_ts, a.end_ts,
           list_extract(
               getvariable('idle_power_watts')::double[],
               list_position(
                   getvariable('idle_power_models')::varchar[],
                   coalesce(u.gpu_model, '(unknown)')
               )
           ) as idle_w
    from analyze_alloc as a
    left join alloc_models as u on u.alloc_id = a.alloc_id
    where a.gpu >= 0
),

samples as (
    select
        host, gpu, gpu_instance, ts, gpu_util, power_w,
        greatest(sm_active, tensor_active) as fine
    from gpu_samples
    where cluster = getvariable('cluster')
      and date between getvariable('date_lo')::date and getvariable('date_hi')::date
      and host between getvariable('host_lo') and getvariable('host_hi')
      and gpu_util is not null
      and util is not null
),

judged as (
    select
        a.job_id, s.gpu_util, s.fine, s.power_w, a.idle_w,
        s.gpu_util >= getvariable('busy_coarse_min_pct')::double as coarse_busy,
        s.fine is null and s.gpu_instance is null and s.power_w is not null
            and a.idle_w is not null as by_power
    from allocs as a
    join samples as s
      on s.host = a.host and s.gpu = a.gpu and s.gpu_instance is not distinct from a.gpu_instance
     and s.ts >= a.start_ts and s.ts < a.end_ts
),

per_job as (
    select
        job_id,
        count(*) as coarse_samples,
        count(fine) as fine_samples,
        count(*) filter (
            where coarse_busy and fine <= getvariable('busy_fine_max_pct')::double
        ) as hollow_samples,
        count(*) filter (where by_power) as power_samples,
        count(*) filter (
            where by_power and coarse_busy
              and power_w <= getvariable('busy_power_max_idle_x')::double * idle_w
        ) as low_power_samples,
        avg(gpu_util) as coarse_util_mean,
        avg(fine) as fine_util_mean,
        avg(power_w) filter (where by_power) as power_mean_w,
        avg(idle_w) filter (where by_power) as idle_power_w
    from judged
    group by job_id
),

final as (
    select * from per_job
)

select * from final
