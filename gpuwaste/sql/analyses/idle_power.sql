-- grain: one row per GPU model (VC '(all)'; no '(all)' model row: a percentile over the samples
--        of several models is no model's idle power): the idle power measured in the data
--        (docs/definitions.md#idle-power).
-- sources: gpu_samples.
-- variables: cluster, all_vcs, idle_mem_floor_mib, gpu_model_patterns and
--            gpu_model_names (the cluster's `gpu_models` map, for samples that name no model).
-- **choice**: the 10th percentile of power over whole-GPU samples with utilization 0 and memory
-- used at or under idle_mem_floor_mib (no context, no kernel), allocated or not. A low
-- percentile, not the lowest: one bad reading does not set it; not the median: a GPU that has
-- just finished work takes tens of seconds to fall to idle. MIG instances are left out: their
-- series repeat the parent's power, which is not idle while another instance works.
with

idle as (
    select
        coalesce(
            gpu_model,
            list_extract(
                getvariable('gpu_model_names')::varchar[],
                list_position(
                    list_transform(
                        getvariable('gpu_model_patterns')::varchar[], lambda p: host glob p
                    ),
                    true
                )
            ),
            '(unknown)'
        ) as gpu_model,
        power_w
    from gpu_samples
    where cluster = getvariable('cluster')
      and power_w is not null
      and gpu_instance is null
      and util = 0
      and coalesce(mem_used_mib, 0) <= getvariable('idle_mem_floor_mib')::double
),

quantiles as (
    select
        getvariable('all_vcs') as vc,
        gpu_model,
        -- both quantiles from one state: two (median and quantile_cont) hold every idle
        -- sample twice, past analyze's memory limit on the benchmark cluster (13.7 M samples)
        quantile_cont(power_w, [0.1, 0.5]) as q,
        count(*) as samples
    from idle
    group by gpu_model
),

final as (
    select
        vc,
        gpu_model,
        q[1] as idle_power_w,
        q[2] as idle_power_median_w,
        samples
    from quantiles
)

select * from final
