-- grain: one row per failed attempt [Philly §4.2, Table 7], with the job's own VC and GPU model
--        (no roll-up rows): its reason, where the reason came from, the matched log line, its
--        runtime to failure and the GPU time it burned.
-- sources: jobs, job_gpus, job_attempts, job_logs, job_usage.
-- variables: cluster, admin_uids (uids whose `CANCELLED by <uid>` is an
--            admin's; default root, 0).
-- An attempt is a job's allocation interval in job_gpus (Slurm: one per run, several for a job
-- requeued and read with `sacct --duplicates`; Philly: each attempt of the trace). It failed
-- when it ended and was retried (not the job's last attempt), or is the last attempt of a job
-- that ended unsuccessful or killed (docs/definitions.md#failures). Its state: the run's own
-- (job_attempts, a requeued Slurm job's runs), else the job's on its last attempt.
-- Its reason, first match wins:
--   1. the scheduler's, from the attempt's state: NODE_FAIL, BOOT_FAIL, OUT_OF_MEMORY,
--      TIMEOUT, DEADLINE, PREEMPTED, REQUEUED (a run ended by a requeue: 'requeued'),
--      CANCELLED by an admin / a user, the trace's Killed;
--   2. the job's logs (job_logs; a file's name gives the job, as the scheduler shows its id,
--      and maybe the attempt): the most specific signature over the attempt's files (.out,
--      .err); a file whose name gives no attempt (Slurm's default slurm-<id>.out, one file for
--      all of a requeued job's runs) is the job's last attempt's: the last run wrote its end;
--   3. the signal of a FAILED attempt: ExitCode's `code:signal` signal (the batch shell itself
--      killed), else an exit code 128 + N, N 1..64 (a command of the script killed by signal N:
--      bash's status for it; a choice, docs/definitions.md#failures); a core-dumping signal
--      (SIGILL 4, SIGABRT 6, SIGBUS 7, SIGFPE 8, SIGSEGV 11) is a core dump, another one a kill
--      by signal;
--   4. 'no signature'.
with

job as (
    select
        j.job_id, coalesce(j.shown_id, j.job_id) as shown_id, j.user,
        coalesce(j.vc, '(none)') as vc, coalesce(u.gpu_model, '(unknown)') as gpu_model,
        j.state, j.raw_state, split_part(j.raw_state, ' ', 1) as base_state,
        regexp_extract(j.raw_state, 'by (\d+)', 1) as cancelled_by,
        j.exit_code, j.exit_signal, j.gpus
    from jobs j
    left join job_usage u on u.cluster = j.cluster and u.job_id = j.job_id
    where j.cluster = getvariable('cluster')
),

attempt as (
    select
        job_id, attempt, min(start_ts) as start_ts,
        -- an attempt still running on a device has not ended
        if(bool_or(end_ts is null), null, max(end_ts)) as end_ts,
        -- GPUs: its devices, unless some index is unknown (gpu = -1: one row per host)
        if(bool_or(gpu < 0), null, count(*)) as devices
    from job_gpus
    where cluster = getvariable('cluster')
    group by job_id, attempt
),

numbered as (
    select a.*, max(a.attempt) over (partition by a.job_id) as last_attempt
    from attempt a
),

-- each run's own state, where the scheduler printed the job more than once (a requeue)
run as (
    select job_id, attempt, raw_state, exit_code, exit_signal
    from job_attempts
    where cluster = getvariable('cluster')
),

failed as (
    select
        n.job_id, n.attempt, n.start_ts, n.end_ts, n.attempt = n.last_attempt as is_last,
        coalesce(n.devices, j.gpus, 0) as gpus,
        epoch(n.end_ts) - epoch(n.start_ts) as runtime_s,
        j.* exclude (job_id, gpus, raw_state, base_state, cancelled_by, exit_code, exit_signal),
        coalesce(r.raw_state, if(n.attempt = n.last_attempt, j.raw_state, null)) as raw_state,
        coalesce(
            split_part(r.raw_state, ' ', 1), if(n.attempt = n.last_attempt, j.base_state, null)
        ) as base_state,
        coalesce(
            regexp_extract(r.raw_state, 'by (\d+)', 1),
            if(n.attempt = n.last_attempt, j.cancelled_by, null)
        ) as cancelled_by,
        if(r.job_id is not null, r.exit_code, if(n.attempt = n.last_attempt, j.exit_code, null))
            as exit_code,
        if(r.job_id is not null, r.exit_signal,
            if(n.attempt = n.last_attempt, j.exit_signal, null)) as exit_signal
    from numbered n
    join job j using (job_id)
    left join run r on r.job_id = n.job_id and r.attempt = n.attempt
    where n.end_ts is not null
        and (n.attempt < n.last_attempt or j.state in ('unsuccessful', 'killed'))
),

-- the names a log file may give a failed attempt's job: its id as the scheduler shows it (an
-- array task `123_4`) and its job_id (an equi-join each, not an `or` join)
log_key as (
    select distinct job_id, attempt, is_last, shown_id as job_key from failed
    union
    select job_id, attempt, is_last, job_id as job_key from failed
),

-- an attempt's log files: those naming it, and on its job's last attempt those naming no attempt
log_file as (
    select k.job_id, k.attempt, l.* exclude (attempt)
    from log_key k
    join job_logs l
        on l.cluster = getvariable('cluster') and l.job_key = k.job_key and l.attempt = k.attempt
    union all
    select k.job_id, k.attempt, l.* exclude (attempt)
    from log_key k
    join job_logs l
        on l.cluster = getvariable('cluster') and l.job_key = k.job_key and l.attempt is null
    where k.is_last
),

-- the most specific signature among an attempt's log files (root causes before implicit
-- rules, then the rule order; a file without a match last; the path breaks a tie)
log_match as (
    select
        l.job_id, l.attempt, arg_min(l.reason, (coalesce(l.rank, 2147483647), l.path)) as reason,
        arg_min(l.sources, (coalesce(l.rank, 2147483647), l.path)) as sources,
        arg_min(l.line, (coalesce(l.rank, 2147483647), l.path)) as line,
        arg_min(l.path, (coalesce(l.rank, 2147483647), l.path)) as log_path,
        arg_min(l.line_no, (coalesce(l.rank, 2147483647), l.path)) as line_no,
        count(*) as log_files
    from log_file l
    group by l.job_id, l.attempt
),

scheduler as (
    select
        job_id, attempt,
        case
            when base_state is null then null
            when base_state = 'NODE_FAIL' then 'node failure'
            when base_state = 'BOOT_FAIL' then 'node boot failure'
            when base_state = 'OUT_OF_MEMORY' then 'CPU OOM'
            when base_state = 'TIMEOUT' then 'time limit'
            when base_state = 'DEADLINE' then 'deadline'
            when base_state = 'PREEMPTED' then 'job preempted'
            when base_state in ('REQUEUED', 'REQUEUE_HOLD', 'REQUEUE_FED') then 'requeued'
            when base_state = 'CANCELLED' and cancelled_by <> ''
                and list_contains(coalesce(getvariable('admin_uids'), ['0']), cancelled_by)
                then 'cancelled by admin'
            when base_state = 'CANCELLED' and cancelled_by <> '' then 'cancelled by user'
            when base_state in ('CANCELLED', 'REVOKED', 'Killed') then 'cancelled'
        end as reason
    from failed
),

reasoned as (
    select
        f.*, s.reason as scheduler_reason, m.reason as log_reason, m.sources as log_sources,
        m.line, m.log_path, m.line_no, coalesce(m.log_files, 0) as log_files,
        case
            when s.reason is not null then s.reason
            when m.reason is not null then m.reason
            when f.base_state = 'FAILED' and f.signal in (4, 6, 7, 8, 11) then 'core dump'
            when f.base_state = 'FAILED' and f.signal > 0 then 'killed by a signal'
            else 'no signature'
        end as reason,
        case
            when s.reason is not null then 'scheduler'
            when m.reason is not null then 'log'
            when f.base_state = 'FAILED' and f.signal > 0 then 'exit status'
            else 'none'
        end as origin
    from (
        -- the signal that ended the attempt: sacct's signal field when the batch shell itself was
        -- killed (`0:11`), else the shell's 128 + N for a command it ran that signal N killed
        -- (`139:0`); 128 itself, 193-255 (`exit -1` is 255) are plain exit codes
        select
            *,
            case
                when exit_signal > 0 then exit_signal
                when exit_code between 129 and 192 then exit_code - 128
            end as signal
        from failed
    ) f
    join scheduler s using (job_id, attempt)
    left join log_match m using (job_id, attempt)
),

final as (
    select
        job_id, attempt, user, vc, gpu_model, raw_state, exit_code, exit_signal, start_ts, end_ts,
        gpus, runtime_s, runtime_s * gpus as gpu_s, reason,
        case
            when origin = 'log' then log_sources
            when reason in ('node failure', 'node boot failure', 'job preempted',
                'cancelled by admin') then 'IF'
            when reason in ('CPU OOM', 'time limit', 'deadline', 'cancelled by user',
                'cancelled') then 'U'
            when reason = 'core dump' then 'AE,U'
        end as sources,
        origin, line, log_path, line_no, log_files
    from reasoned
)

select * from final
