-- grain: one row per allocation of a known GPU (analyze_alloc, gpu >= 0) of this batch: the model
--        of its device and that model's idle power. Run once per batch, before its host ranges.
-- sources: analyze_alloc (staging/allocations.sql), device_models (staging/device_models.sql).
-- variables: gpu_model_patterns and gpu_model_names (the cluster's `gpu_models` map: host glob
--            -> model; unset: none), idle_power_models and idle_power_watts (busy_power.py:
--            the models' idle power measured in the data; unset: none).
-- gpu_model (docs/analyses.md#gpu-models): DCGM modelName of the device's samples, else the
-- first host pattern that matches, else the scheduler's GPU type (Slurm GRES type);
-- job_gpu_usage.sql reports it. idle_power_w: the idle power of that model (of '(unknown)' for
-- a device of no model), for the power arm of looks_busy (looks_busy.py).
with

models as (
    select
        a.alloc_id,
        coalesce(
            dm.gpu_model,
            list_extract(
                getvariable('gpu_model_names')::varchar[],
                list_position(
                    list_transform(
                        getvariable('gpu_model_patterns')::varchar[], lambda p: a.host glob p
                    ),
                    true
                )
            ),
            a.gpu_model
        ) as gpu_model
    from analyze_alloc as a
    left join device_models as dm
      on dm.host = a.host and dm.gpu = a.gpu and dm.gpu_instance is not distinct from a.gpu_instance
    where a.gpu >= 0
),

final as (
    select
        alloc_id,
        gpu_model,
        list_extract(
            getvariable('idle_power_watts')::double[],
            list_position(
                getvariable('idle_power_models')::varchar[], coalesce(gpu_model, '(unknown)')
            )
        ) as idle_power_w
    from models
)

select * from final
