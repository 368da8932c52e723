-- grain: one row per device (host, gpu, gpu_instance) of this batch's hosts (host_lo to host_hi)
--        whose samples on the batch's days (date_lo to date_hi) name a GPU model (DCGM
--        `modelName`), with that model. Run once per batch, before its host ranges.
-- sources: gpu_samples.
-- variables: cluster, date_lo, date_hi, host_lo, host_hi.
-- The model of a device (docs/analyses.md#gpu-models): DCGM `modelName` from here, else the
-- cluster's `gpu_models` host patterns, else the scheduler's GPU type (job_gpu_usage.sql).
with

labelled as (
    select host, gpu, gpu_instance, gpu_model
    from gpu_samples
    where cluster = getvariable('cluster')
      and date between getvariable('date_lo')::date and getvariable('date_hi')::date
      and host between getvariable('host_lo') and getvariable('host_hi')
      and gpu_model is not null
),

final as (
    select host, gpu, gpu_instance, max(gpu_model) as gpu_model
    from labelled
    group by host, gpu, gpu_instance
)

select * from final
