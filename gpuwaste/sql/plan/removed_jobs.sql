-- grain: one row per job the last `gpuwaste analyze` saw that is no longer in the warehouse
--        (its result rows are removed).
-- sources: the fingerprints of this run and of the last one (parquet files named by the
--          variables `fingerprints` and `previous`).
-- variables: fingerprints, previous (paths).
with

final as (
    select b.job_id
    from read_parquet(getvariable('previous')) as b
    anti join read_parquet(getvariable('fingerprints')) as n using (job_id)
)

select * from final
