-- grain: one row per VC (and '(all)') x GPU model (and '(all)') x length threshold t x idle-memory threshold m
--        [CloudBrain §IV-B, Table III]: percent of all GPU time in stable phases, i.e. phases
--        longer than t whose idle memory (capacity - highest memory used) exceeds m GiB.
-- sources: stable_phases, job_usage, job_gpu_usage (the device's gpu_weight: a phase on a MIG
--          instance holds its slice's share of GPU time, docs/analyses.md#mig-instances).
-- variables: cluster, stable_phase_lengths_s, stable_phase_idle_gib.
-- The job's GPU model is job_usage.gpu_model (docs/analyses.md#split-by-gpu-model); the rows of
-- model '(all)' are every model together.
with

jobs as (
    select job_id, coalesce(vc, '(none)') as vc, gpu_model, gpu_s
    from job_usage
    where cluster = getvariable('cluster')
),

phases as (
    select p.job_id, j.vc, j.gpu_model, p.duration_s, p.duration_s * coalesce(d.gpu_weight, 1.0) as gpu_s,
           p.idle_mem_mib
    from stable_phases as p
    join jobs as j using (job_id)
    left join job_gpu_usage as d
      on d.cluster = p.cluster and d.job_id = p.job_id and d.attempt = p.attempt
     and d.host = p.host and d.gpu = p.gpu and d.gpu_instance is not distinct from p.gpu_instance
    where p.cluster = getvariable('cluster')
),

grid as (
    select t_s, m_gib
    from unnest(getvariable('stable_phase_lengths_s')) as l(t_s)
    cross join unnest(getvariable('stable_phase_idle_gib')) as m(m_gib)
),

job_rows as (
    select * from jobs
    union all
    select * replace ('(all)' as vc) from jobs
),

with_models as (
    select * from job_rows
    union all
    select * replace ('(all)' as gpu_model) from job_rows
),

vcs as (
    select vc, gpu_model, sum(gpu_s) as gpu_s from with_models group by vc, gpu_model
),

stable as (
    select p.vc, p.gpu_model, g.t_s, g.m_gib, sum(p.gpu_s) as stable_gpu_s
    from phases as p
    join grid as g on p.duration_s > g.t_s and p.idle_mem_mib > g.m_gib * 1024
    group by p.vc, p.gpu_model, g.t_s, g.m_gib
),

stable_vcs as (
    select * from stable
    union all
    select '(all)' as vc, gpu_model, t_s, m_gib, sum(stable_gpu_s)
    from stable group by gpu_model, t_s, m_gib
),

stable_all as (
    select * from stable_vcs
    union all
    select vc, '(all)' as gpu_model, t_s, m_gib, sum(stable_gpu_s)
    from stable_vcs group by vc, t_s, m_gib
),

final as (
    select
        v.vc, v.gpu_model, g.t_s, g.m_gib,
        coalesce(s.stable_gpu_s, 0) as stable_gpu_s,
        v.gpu_s,
        100 * coalesce(s.stable_gpu_s, 0) / nullif(v.gpu_s, 0) as pct
    from vcs as v
    cross join grid as g
    left join stable_all as s
      on s.vc = v.vc and s.gpu_model = v.gpu_model and s.t_s = g.t_s and s.m_gib = g.m_gib
)

select * from final
