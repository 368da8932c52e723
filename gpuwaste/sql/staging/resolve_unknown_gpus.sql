-- grain: one row per (job x attempt x host) allocation whose GPU index is unknown (-1) x each GPU
--        of that host whose samples carry the job's label (DCGM `hpc_job`) inside the interval:
--        each labelled device, a whole GPU or a MIG instance (an allocation of a MIG profile,
--        e.g. Slurm's gres/gpu:1g.10gb, resolves only to instances of that profile). The weight
--        is allocations.sql's rule.
-- sources: analyze_alloc (staging/allocations.sql), gpu_samples.
-- variables: cluster, date_lo, date_hi.
-- macros: mig_slice_weight (gpuwaste/warehouse/mig.py, analyses/sqlfiles.define_macros).
with

unknown as (
    select job_id, attempt, host, mig_profile, gpu_model, start_ts, end_ts
    from analyze_alloc
    where gpu < 0
),

labelled as (
    select host, gpu, gpu_instance, mig_profile, gpu_model, ts, job_id
    from gpu_samples
    where cluster = getvariable('cluster')
      and date between getvariable('date_lo')::date and getvariable('date_hi')::date
      and job_id is not null
),

final as (
    select distinct
        u.job_id, u.attempt, u.host, l.gpu, l.gpu_instance,
        coalesce(l.mig_profile, u.mig_profile) as mig_profile,
        coalesce(l.gpu_model, u.gpu_model) as gpu_model,
        mig_slice_weight(coalesce(l.mig_profile, u.mig_profile)) as gpu_weight,
        u.start_ts, u.end_ts
    from unknown as u
    join labelled as l
      on l.host = u.host
     and l.job_id = u.job_id
     and l.ts >= u.start_ts
     and l.ts < u.end_ts
     and (u.mig_profile is null or l.mig_profile = u.mig_profile)
)

select * from final
