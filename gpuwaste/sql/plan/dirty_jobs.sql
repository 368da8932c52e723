-- grain: one row per job to recompute in an incremental `gpuwaste analyze`, with the columns of
--        plan/job_fingerprints.sql.
-- sources: the fingerprints of this run and of the last one (parquet files named by the
--          variables `fingerprints` and `previous`).
-- variables: fingerprints, previous (paths), changed_days (UTC days whose sample files were
--            added, rewritten or removed, as 'YYYY-MM-DD' strings; NULL for none), as_of_moved
--            (the data reaches further than last time), since (--since; NULL without).
-- choice: a job is recomputed when it is new or its record or allocations changed, when its
--         allocations span a day whose samples changed, when it runs and the data reaches
--         further, or when it ends on or after --since.
with

now as (select * from read_parquet(getvariable('fingerprints'))),

before as (select job_id, fingerprint from read_parquet(getvariable('previous'))),

changed_days as (
    select unnest(coalesce(getvariable('changed_days'), []::varchar[]))::date as day
),

final as (
    select n.*
    from now as n
    where not exists (
            select 1 from before as b where b.job_id = n.job_id and b.fingerprint = n.fingerprint
        )
        or exists (
            select 1 from changed_days as d where n.first_day <= d.day and n.last_day >= d.day
        )
        or (getvariable('as_of_moved') and n.running)
        or n.last_day >= getvariable('since')::date
)

select * from final
