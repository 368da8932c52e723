-- grain: one row per VC (and '(all)') x GPU model (and '(all)') x length threshold t x idle-memory threshold m
--        [CloudBrain §IV-B, Table III]: percent of all GPU time in stable phases, i.e. phases
--        longer than t whose idle memory (capacity - highest memory used) exceeds m GiB.
-- sources: stable_phases, job_usage, job_gpu_usage (the device's gpu_weight: a phase on a MIG
--          instance holds its slice's share of GPU time, docs/analyses.md#mig-instances).
-- variables: cluster, all_vcs, all_models, stable_phase_lengths_s, stable_phase_idle_gib.
-- The job's GPU model is job_usage.gpu_model (docs/analyses.md#split-by-gpu-model); the rows of
-- model '(all)' are every model together.
-- The rows of VC / model '(all)' are the groups of `cube(vc, gpu_model)` that roll a column
-- up, labelled with the variables all_vcs and all_models (ROLLUP_LABELS in
-- gpuwaste/warehouse/results.py, set by whatever runs the summaries).
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

vcs as (
    select
        if(grouping(vc) = 1, getvariable('all_vcs'), vc) as vc,
        if(grouping(gpu_model) = 1, getvariable('all_models'), gpu_model) as gpu_model,
        sum(gpu_s) as gpu_s
    from jobs
    group by cube(vc, gpu_model)
),

stable as (
    select
        if(grouping(p.vc) = 1, getvariable('all_vcs'), p.vc) as vc,
        if(grouping(p.gpu_model) = 1, getvariable('all_models'), p.gpu_model) as gpu_model,
        g.t_s, g.m_gib, sum(p.gpu_s) as stable_gpu_s
    from phases as p
    join grid as g on p.duration_s > g.t_s and p.idle_mem_mib > g.m_gib * 1024
    group by g.t_s, g.m_gib, cube(p.vc, p.gpu_model)
),

final as (
    select
        v.vc, v.gpu_model, g.t_s, g.m_gib,
        coalesce(s.stable_gpu_s, 0) as stable_gpu_s,
        v.gpu_s,
        100 * coalesce(s.stable_gpu_s, 0) / nullif(v.gpu_s, 0) as pct
    from vcs as v
    cross join grid as g
    left join stable as s
      on s.vc = v.vc and s.gpu_model = v.gpu_model and s.t_s = g.t_s and s.m_gib = g.m_gib
)

select * from final
