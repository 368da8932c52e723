"""Every analysis, declared once: its result table, SQL file, title, paper section and inputs.

Every list of analyses is derived from `ANALYSES`: the order `gpuwaste analyze` runs the
summaries in (`summary_order`, from their inputs), the titles and names of `gpuwaste report`
(and its `--help`), the dashboard's list of result tables, and the test that docs/analyses.md
names each one. To add a summary: write `gpuwaste/sql/analyses/<name>.sql`, declare its table in
`gpuwaste/warehouse/results.py`, and add one `Analysis` below.

Three kinds:
- `per_job`: one row set per job, computed in batches by the per-job pass (`per_job.py`, whose
  steps read the batch's own relations); a re-run of a job replaces exactly its rows.
- `summary`: one cluster's figures, computed by its SQL file alone over the per-job tables, with
  the variables `cluster` and the thresholds set; its grain starts with VC and GPU model, each
  with its '(all)' roll-up.
- `cluster_rows`: one row per event of a cluster that involves several jobs (a waiting stretch
  and the cluster's state while it lasted), computed as a summary is, in the same run order (a
  summary may read it), but with a grain of its own and no roll-up rows.

Each definition has one home, the code `gpuwaste analyze` runs: a summary's SQL file; for the
per-job tables, the steps of per_job.py, whose per-sample part is Python (`job_samples.py`,
`sample_flags.py`, `allocation_sums.py`, `idle_slots.py`, `stable_phases.py`, `energy.py`:
polars, numpy and compiled loops) and whose roll-ups per GPU and per job are SQL
(`job_gpu_usage.sql`, `job_usage.sql`). The SQL restatements of the Python steps under tests/oracles/ are test
oracles, not definitions.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from graphlib import TopologicalSorter
from typing import Literal

import duckdb
import polars as pl

from gpuwaste.analyses.sqlfiles import define_macros, load_sql, set_variables
from gpuwaste.warehouse.reading import read_frame, read_rows, run
from gpuwaste.warehouse.results import RESULT_TABLES, ROLLUP_LABELS
from gpuwaste.warehouse.schema import Table

Kind = Literal["per_job", "summary", "cluster_rows"]


@dataclass(frozen=True)
class Analysis:
    name: str  # its result table (declared in gpuwaste/warehouse/results.py)
    kind: Kind
    title: str  # what `gpuwaste report` prints above the table
    section: str  # where the study defines it
    inputs: tuple[str, ...]  # tables and batch relations its SQL reads (its header's sources)
    definition: str  # what it computes, in words (docs/definitions.md for the full rule)
    sql: str = ""  # file under gpuwaste/sql/, without .sql (default: analyses/<name>)
    # staging queries its SQL reads by name (gpuwaste/sql/staging/<name>.sql, over its inputs and
    # the staging queries before it): made temp views first, so that a definition several
    # summaries share has one home (a run computes each once, a temp table: `STAGING_TABLES`)
    staging: tuple[str, ...] = ()
    # which jobs its `jobs` column counts, where its table has one: tables count different jobs
    # (those that held a GPU, that started, ...), so `gpuwaste report` says it under the table
    jobs: str = ""
    # a long table's figure its terminal table is about: its rows are listed by it, most first,
    # and those where it reads 0 in its unit are counted in a note instead (render.most_first);
    # CSV and JSON keep every row in key order
    most_first: str = ""
    # the column that dates a row of a table of whole events (waits, failed attempts):
    # `gpuwaste report --since` keeps its stored rows dated at or after the time instead of
    # recomputing it over the jobs that started since, which would judge them against a cluster
    # emptied of the jobs that started before (occupancy, retries)
    dated_by: str = ""

    @property
    def sql_file(self) -> str:
        return self.sql or f"analyses/{self.name}"

    @property
    def table(self) -> Table:
        return RESULT_TABLES[self.name]

    @property
    def key(self) -> tuple[str, ...]:
        return self.table.key

    def compute(self, con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
        """Its SQL over `con` (a summary: over the result tables of the cluster in the variable
        `cluster`, the thresholds set). The labels of its roll-up rows are set here, from
        the one definition in warehouse/results.py. A staging relation already on `con` (a
        run's temp table, `make_staging_tables`) is read as it is."""
        prepare(con)
        for name in self.staging:
            run(con, f"create temp view if not exists {name} as {load_sql(f'staging/{name}')}")
        return read_frame(con, load_sql(self.sql_file))


def prepare(con: duckdb.DuckDBPyConnection) -> None:
    """What every analysis's SQL runs with: the labels of roll-up rows, the macros, and no ASOF join
    planned as a nested loop. DuckDB plans an ASOF join whose left side it estimates at
    `asof_loop_join_threshold` rows or fewer (64) as a loop over both sides; the left sides of
    the queue analyses' ASOF joins come out of joins and filters it estimates far too low (57
    rows for 60,847 in one of queue_idle_overlap's lookups of a holder's idle GPU-seconds over the
    run's temp table of pieces: 13 M pairs looped), and their right sides are small. Not on a
    connection whose settings are locked (the dashboard's read-only one): the summaries it
    recomputes (period_summary.EVENT_SUMMARIES) join nothing by ASOF."""
    set_variables(con, ROLLUP_LABELS)
    define_macros(con)
    if read_rows(con, "select current_setting('lock_configuration')")[0][0] is not True:
        run(con, "set asof_loop_join_threshold = 0")


def _summary(
    name: str,
    title: str,
    section: str,
    inputs: tuple[str, ...],
    definition: str,
    staging: tuple[str, ...] = (),
    kind: Kind = "summary",
    jobs: str = "",
    most_first: str = "",
    dated_by: str = "",
) -> Analysis:
    return Analysis(
        name,
        kind,
        title,
        section,
        inputs,
        definition,
        staging=staging,
        jobs=jobs,
        most_first=most_first,
        dated_by=dated_by,
    )


_cluster_rows = partial(_summary, kind="cluster_rows")


ANALYSES: tuple[Analysis, ...] = (
    # ---------------------------------------------------------------- per job (per_job.py)
    Analysis(
        "job_gpu_usage",
        "per_job",
        "Usage per job x attempt x GPU",
        "ICSE24 §3.2; CloudBrain §III-B, §IV-C",
        (
            "analyze_alloc",
            "gpu_sample_stats",
            "batch_idle_slots",
            "batch_phase_counts",
            "alloc_models",
            "job_gpu_summaries",
            "batch_energy",
            "batch_held_idle",
        ),
        "Definitions (docs/definitions.md#gpu-utilization): for GPU i of a job with samples u_ij at times t_j, "
        "U_i = sum_j u_ij (t_j - t_(j-1)) / (t_K - t_0), time-weighted; **choice**: a gap between "
        "samples longer than `missing_gap_intervals` (3) sampling intervals is *missing data*, "
        "counted neither idle nor busy, so the denominator here is the observed seconds and "
        "`missing_s` is reported beside. The sampling interval is `sampling_interval_s`, else "
        "the median spacing of the GPU's own samples (`fallback_interval_s` with fewer than "
        "two). A *never-used GPU* is an allocated GPU not used at any time of the job (every "
        "sample idle); its observed time is `never_used_s`. "
        "Grain: one row per job x attempt x allocated GPU, with "
        "idle_slot_s + never_used_s + busy_s + missing_s = alloc_s, where busy is observed time "
        "outside idle slots (idle runs of 60 s or less count as busy). `low_data` marks a GPU "
        "observed for less than `min_observed_share` of its allocation: it is flagged, not "
        "judged. A GPU with no sample but a Jobstats end-of-job summary (Slurm's AdminComment) "
        "takes the summary's mean utilization and peak memory over its whole allocation, and "
        "is never used when that mean is 0 and the peak at most `idle_mem_floor_mib` "
        "(`figures_from` = 'jobstats-summary'; no idle slots or phases from a mean). "
        "judged. Energy (docs/definitions.md#energy): `energy_kwh`, the device's energy counter's "
        "increase over its observed time (resets counted from the new value), else power x "
        "the seconds each sample stands for (gaps not filled); `lost_energy_kwh`, the part in "
        "idle slots, or all of it on a never-used device; both slice-weighted on MIG and null "
        "where the device has no reading. Idle held versus empty (docs/definitions.md#idle): "
        "`idle_held_s`, stretches longer than `idle_slot_min_s` of utilization 0 with memory "
        "above `idle_mem_floor_mib` (memory held, no kernel; busy time for the studies), and "
        "`idle_empty_s` = `idle_slot_s`; `held_idle_energy_kwh` their energy, beside "
        "`lost_energy_kwh`, not in it. Units: seconds, percent 0-100, MiB, kWh, W.",
    ),
    Analysis(
        "idle_slots",
        "per_job",
        "Idle slots of jobs' GPUs",
        "CloudBrain §IV-C",
        ("sample_flags", "gpu_sample_stats", "analyze_alloc"),
        "Definition (docs/definitions.md#idle-slots): an *idle slot* of a job's GPU "
        "is a period longer than 60 s (`idle_slot_min_s`, strictly longer) in which the GPU is "
        'not used at all: GPU utilization = 0 and GPU memory used = 0; **choice**: "memory used '
        '= 0" means at or under `idle_mem_floor_mib` (default 0 MiB). Missing data is never '
        "idle: a gap longer than `missing_gap_intervals` sampling intervals ends a run. A "
        "never-used GPU has no idle slots (its whole observed time is never-used time, see "
        "job_gpu_usage). Grain: one row per idle slot of a job x attempt x GPU; start_ts/end_ts "
        "are the edges of the time its idle samples stand for (sample j stands for "
        "(t_(j-1), t_j]). Units: seconds.",
    ),
    Analysis(
        "stable_phases",
        "per_job",
        "Memory phases of jobs' GPUs",
        "CloudBrain §IV-B, Table III",
        ("sample_flags",),
        "Memory phases and stable phases (docs/definitions.md#memory-phases): the definition is the docstring of "
        "gpuwaste/analyses/stable_phases.py, which cuts the readings into runs "
        "(`level_runs_frame`) and merges runs into phases in polars.",
    ),
    Analysis(
        "job_util_hist",
        "per_job",
        "GPU-minutes per job by per-minute GPU utilization",
        "Philly §3, Figure 5 and Table 3",
        ("util_buckets", "analyze_alloc"),
        "Definition (docs/definitions.md#per-minute-utilization): the CDF of per-minute GPU "
        "utilization by job size and final status. Philly sampled once a minute; here a minute "
        "(counted from the attempt's start) of one GPU has the time-weighted mean utilization of "
        "the samples in it, and weighs the seconds of data in it. Stored per job as GPU-minutes "
        "in 1-point buckets (0..100) so that the cluster summaries (util_by_size_status, "
        "util_minute_hist, util_by_spread) can be re-aggregated when only some jobs change. "
        "Grain: one row per job x bucket. Units: GPU-minutes.",
    ),
    Analysis(
        "job_usage",
        "per_job",
        "Usage, flags and diagnoses per job",
        "ICSE24 §3.2, Table 1; CloudBrain §III-B, §IV-B, §IV-C; Philly §3, §4",
        (
            "jobs",
            "analyze_batch",
            "batch_gpu_usage",
            "batch_host_usage",
            "batch_busy_evidence",
            "batch_fluctuation",
            "batch_checkpoint",
            "batch_idle_slots",
            "batch_phases",
        ),
        "Definitions (docs/definitions.md#job-usage): job U = mean over its GPUs of U_i (job_gpu_usage); "
        "GPU memory utilization likewise, with the maximum beside the mean; CPU and host memory: "
        "the mean of each host's series during the job, then the mean over its hosts "
        "[CloudBrain §III-B]. Size class [Philly Table 3]: 1, 2-4, 5-8, >8 GPUs; queueing delay: "
        "submission to first start. Debugging [CloudBrain §IV-C1, ICSE24 §4.1]: declared by the "
        "scheduler (`jobs.is_debug`), or **choice** inferred when idle-slot time exceeds "
        "`infer_debug_idle_share` (50 %) of the job's GPU time and it has at least "
        "`infer_debug_min_slots` (3) idle slots; kept apart. `idle_share`: share of GPU time in "
        'idle slots or on never-used GPUs (the "unused" share of CloudBrain §IV-C1). '
        "`hit_time_limit`: ran at least `debug_max_duration_h` minus `debug_limit_tolerance_s`, "
        "or ended in TIMEOUT. Fluctuating [CloudBrain §IV-B] **choice**: 120 s windows from "
        "each attempt's start; a window of one GPU fluctuates when max - min utilization "
        "exceeds 90 points; the job when more than 75 % of its GPU windows do (GPU utilization "
        "only: host samples are too coarse for 120 s windows). Diagnoses [ICSE24 Table 1] for "
        "jobs with U <= `low_util_pct` that have enough data: improper_batch_size, "
        "insufficient_gpu_memory, gpu_oversubscription, unreleased_job (idle over the final "
        "`unreleased_min_s`), slow_start (idle over the first `slow_start_min_s`), non_dl_job "
        "(no GPU ever used while CPU utilization > `very_low_pct`), interactive_job, "
        "synchronous_checkpointing; and, whatever U, looks_busy. `looks_busy` (#44) **choice**: in "
        "more than `looks_busy_share` (50 %) of the job's samples that carry the coarse busy "
        "metric (gpu_samples.gpu_util: DCGM GPU_UTIL, nvidia-smi's utilization) it reads at least "
        "`busy_coarse_min_pct` (90 %) while SM or tensor activity is at most `busy_fine_max_pct` "
        "(5 %) or, on samples without either, power is at most `busy_power_max_idle_x` (4) x the "
        "model's idle power (idle_power, measured once per run): a kernel ran, the GPU did almost "
        "nothing (a busy loop); null where no sample can be judged; its evidence (the means and "
        "the share, per arm) in the diagnoses text. Checkpointing [ICSE24 Table 1] **choice**: some GPU of the "
        "job drops to utilization 0 at least `checkpoint_min_dips` (3) times between busy "
        "stretches, with dip-to-dip spacing varying by under `checkpoint_spacing_tolerance` "
        "(20 %) of its mean (allocation_sums.checkpointing); kept as its own flag for every "
        "job, and a diagnosis for the low-utilization ones. A running job (no end yet) is "
        "analyzed up to the watermark and marked `running`. Grain: one row per job. Units: "
        "seconds, percent 0-100, MiB.",
    ),
    # ---------------------------------------------------------------- summaries (one SQL each)
    _summary(
        "waste_by_vc",
        "Idle slots and never-used GPUs, % of GPU time (CloudBrain Table IV)",
        "CloudBrain §IV-C, Table IV",
        ("job_usage",),
        "Definition (docs/definitions.md#waste-by-vc): Idle-slot and never-used GPU time, each as a percent "
        'of the GPU time of the jobs of that kind ("among its own job") and of all jobs of the '
        'VC ("among all the jobs"); split into declared debugging, inferred debugging and '
        "non-debugging jobs, with totals. Grain: one row per VC x GPU model of the job (each with '(all)') x kind. Units: "
        "seconds, percent 0-100.",
        jobs="every job, those that never held a GPU too (under GPU model '(unknown)')",
    ),
    _summary(
        "never_used_by_size",
        "Jobs with a never-used GPU by GPUs requested (CloudBrain Table V)",
        "CloudBrain §IV-C, Table V",
        ("job_usage",),
        "Definition (docs/definitions.md#never-used-by-size): By number of GPUs requested (1, 2, 4, 8, 16, other), "
        "the number and share of jobs that have at least one never-used GPU (jobs with no GPU "
        "time are left out). Grain: one row per VC x GPU model of the job (each with '(all)') x GPUs requested (and 'all'). "
        "Units: seconds, percent 0-100.",
        jobs="the jobs with GPU time",
    ),
    _summary(
        "stable_phase_grid",
        "% of GPU time in stable phases, t x m (CloudBrain Table III)",
        "CloudBrain §IV-B, Table III",
        ("stable_phases", "job_usage", "job_gpu_usage"),
        "Definition (docs/definitions.md#stable-phase-grid): For t in `stable_phase_lengths_s` and m in "
        "`stable_phase_idle_gib`, the percentage of all GPU time that lies in stable phases "
        "(phases longer than t whose idle memory exceeds m). Grain: one row per VC x GPU model of the job "
        "(each with '(all)') x t x m. Units: seconds, percent 0-100.",
    ),
    _summary(
        "spatial_summary",
        "Spatial underutilization; the means are over jobs, each job once "
        "(CloudBrain §IV-A, §IV-B)",
        "CloudBrain §IV-A, §IV-B",
        ("job_usage",),
        "Definition (docs/definitions.md#spatial-summary): Means and maxima of GPU, GPU memory, CPU and host "
        "memory utilization over jobs; shares of jobs under the thresholds (`low_share_pct`, "
        "`very_low_pct`), mismatch shares (`mismatch_high_pct` vs `mismatch_low_pct`), "
        "fluctuating jobs, jobs with more than one stable phase and whose phase levels differ by "
        "more than 1 and 8 GiB. Jobs flagged low_data are left out. Grain: one row per VC x GPU model of "
        "the job (each with '(all)') x metric. Units: seconds, percent 0-100.",
        jobs="the jobs with enough samples (not low_data)",
    ),
    _summary(
        "debug_jobs",
        "Debugging jobs (CloudBrain §IV-C1)",
        "CloudBrain §IV-C1, ICSE24 §4.1",
        ("job_usage",),
        "Definition (docs/definitions.md#debug-jobs): Debugging jobs, declared and inferred kept apart: the "
        "share that reaches the maximum duration for debugging jobs (`debug_max_duration_h`) and "
        "the share whose GPUs are unused (idle slots or never used) for `debug_unused_share` "
        "(80 %) of their GPU time or more. Grain: one row per VC x GPU model of the job (each with '(all)') x kind (declared "
        "| inferred | any). Units: seconds, percent 0-100.",
        jobs="the debugging jobs only",
    ),
    _summary(
        "util_by_size_status",
        "GPU utilization (time-weighted mean) by size and status (Philly Table 3)",
        "Philly §3, Table 3",
        ("job_gpu_usage", "job_usage"),
        "Definition (docs/definitions.md#utilization-by-size-and-status): Mean GPU utilization by job size (1, 4, 8, 16 GPUs, "
        "all) x final status (and all), weighted by observed GPU-minutes. Grain: one row per VC "
        "x GPU model of the job (each with '(all)') x size x status. Units: seconds, percent 0-100.",
        jobs="the jobs with GPU samples (a size row: those of 1, 4, 8 or 16 GPUs)",
    ),
    _summary(
        "util_minute_hist",
        "Per-minute GPU utilization, GPU-minutes (Philly Figure 5)",
        "Philly §3, Figure 5",
        ("job_util_hist", "job_usage"),
        "Definition (docs/definitions.md#per-minute-utilization-histogram): Per-minute GPU utilization as GPU-minutes in 1-point "
        "buckets by job size x final status; cumulate for the CDF of the figure. Grain: one row "
        "per VC x GPU model of the job (each with '(all)') x size x status x bucket. Units: seconds, percent 0-100.",
    ),
    _summary(
        "util_by_spread",
        "16-GPU jobs by number of servers: GPU utilization (time-weighted mean), "
        "percentiles of per-minute utilization (Philly Table 5)",
        "Philly §3, Table 5",
        ("job_usage", "job_gpu_usage", "job_util_hist"),
        "Definition (docs/definitions.md#utilization-by-spread): GPU utilization of 16-GPU jobs by the number of "
        "servers they are spread over: mean (observed-time weighted) and the 50th, 90th, 95th "
        "percentiles of per-minute utilization. Grain: one row per VC x GPU model of the job (each with '(all)') x number of "
        "servers. Units: seconds, percent 0-100.",
        jobs="the 16-GPU jobs only",
    ),
    _summary(
        "jobs_by_status",
        "Jobs and GPU time by final status (Philly Table 6)",
        "Philly §4, Table 6",
        ("job_usage",),
        "Definition (docs/definitions.md#jobs-by-status): Jobs and GPU time by final status (passed, killed, "
        "unsuccessful; running jobs apart). Grain: one row per VC x GPU model of the job (each with '(all)') x status. Units: "
        "seconds, percent 0-100.",
        jobs="every job, those that never held a GPU too",
    ),
    _summary(
        "queueing_delay",
        "Queueing delay, minutes (Philly §3)",
        "Philly §3",
        ("job_usage",),
        "Definition (docs/definitions.md#queueing-delay): Queueing delay: time from submission to the start of "
        "the first attempt, by job size class and VC: mean, 50th, 90th, 99th percentiles. "
        "Grain: one row per VC x GPU model of the job (each with '(all)') x size class (and 'all'). Units: seconds, percent "
        "0-100.",
        jobs="the jobs that started (they have a queueing delay)",
    ),
    _cluster_rows(
        "queue_causes",
        "Waiting stretches by cause (Philly §3.1)",
        "Philly §3.1, Table 2",
        ("job_gpu_usage", "job_gpus", "job_usage", "gpu_samples"),
        "Definition (docs/definitions.md#queueing-causes): each waiting stretch of a job "
        "(submission to the first attempt's start; an attempt's end to the next one's start) is "
        "cut at every change of the cluster's occupancy (job_gpu_usage; a job without known GPU "
        "indices: its GPU count spread evenly over its hosts, job_gpus) and each piece is "
        "classified, in this order: fair-share (quotas `[clusters.vc_quotas]` are known and the "
        "VC held at least its quota), capacity (fewer GPUs free than the "
        "job's), fragmentation (enough free, but fewer hosts with the job's GPUs per host free "
        "than the hosts it ran on), other. Capacity is the GPUs seen per host in telemetry or "
        "allocations, at least the most it held at once (MIG by slice). The stretch's cause is that of most of its seconds. Out-of-order: a start "
        "while an earlier-submitted job waited (not for fair-share) that the started job's GPUs "
        "would have fitted. Grain: one row per start of an attempt. Units: seconds, GPUs.",
        staging=("queue_wait_pieces",),
        dated_by="wait_end",  # the start its wait ended in
    ),
    _summary(
        "queue_cause_summary",
        "Queueing delay by cause and job size, % of occurrences and of time (Philly Table 2)",
        "Philly §3.1, Table 2",
        ("queue_causes",),
        "Definition (docs/definitions.md#queueing-causes): by VC x GPU model (each with "
        "'(all)') x size class (1, 2-4, 5-8, >8, all) x cause: waiting stretches of that cause "
        "and their share of the class's stretches, seconds waited for it and their share of "
        "the class's waiting time; beside them the starts and the share out of order, and "
        "whether fair-share was judged. Units: seconds, percent 0-100.",
    ),
    _cluster_rows(
        "queue_idle_overlap",
        "GPU time waited behind idle GPUs, per waiting stretch and holder",
        "gpuwaste (no study reports it)",
        ("queue_causes", "idle_slots", "job_gpu_usage", "job_gpus", "job_usage", "gpu_samples"),
        "Definition (docs/definitions.md#waiting-behind-idle-gpus): for each waiting stretch "
        "and each user holding allocated GPUs idle (in idle slots or never used) while it "
        "waited, the idle GPU-seconds inside the stretch and, **choice**, the GPU-seconds that "
        "kept it waiting: only in the pieces of the wait whose cause (queue_causes) is "
        "capacity or fragmentation, or fair-share for holders in the waiting job's VC, at most "
        "the stretch's own GPU-seconds there; the holder's idle GPUs serve at most the GPUs "
        "other users wait for at each moment and, apart, by the same rule, at most the GPUs "
        "its own user's jobs wait for (same_user). Grain: one row per waiting stretch x "
        "holder (user, VC). Units: GPU-seconds.",
        staging=("queue_wait_pieces", "queue_idle_holders", "queue_span_idle"),
        most_first="blocked_gpu_s",
        dated_by="wait_end",
    ),
    _summary(
        "waste_daily",
        "GPU hours per UTC day by kind",
        "CloudBrain §IV-C; ICSE24 §3.2; Philly §4",
        ("job_gpu_usage", "job_usage"),
        "Definition: allocated GPU time (docs/definitions.md#daily-waste) split into busy, "
        "idle-slot [CloudBrain §IV-C], never-used [CloudBrain §IV-C] and no-data (missing, "
        "[ICSE24 §3.2] choice) hours, which add up to the allocated hours; beside them the GPU "
        "hours of debugging jobs (declared or inferred), failed (unsuccessful) and killed jobs "
        "[Philly §4]. An allocation is split across the days it spans in proportion to its "
        "overlap with each day. Grain: one row per VC x GPU model of the job (each with '(all)') x UTC day. Units: GPU "
        "hours.",
        staging=("allocation_days",),
    ),
    _summary(
        "waste_by_model",
        "GPU hours lost per GPU model",
        "CloudBrain §IV-C (by GPU model)",
        ("job_gpu_usage", "job_usage"),
        "Definition (docs/definitions.md#waste-by-model): per GPU model, allocated GPU hours "
        "(slice-weighted on MIG) split into busy, idle-slot and never-used [CloudBrain §IV-C], "
        "lost = idle-slot + never-used and its share, and GPU utilization (time-weighted mean) "
        "[ICSE24 §3.2]. Grain: one row per VC (and '(all)') x GPU model of each GPU (and '(all)'). Units: GPU hours, "
        "percent 0-100.",
        jobs="the jobs that held a GPU, under the model of each GPU",
    ),
    _cluster_rows(
        "failure_attempts",
        "Failed attempts with their reason and matched log line (Philly §4.2)",
        "Philly §4.2, Table 7",
        ("jobs", "job_gpus", "job_attempts", "job_logs", "job_usage"),
        "Definition (docs/definitions.md#failures): an attempt (a job's allocation in job_gpus) "
        "failed when it ended and was retried, or is the last attempt of a job that ended "
        "unsuccessful or killed. Its reason comes from the scheduler first (NODE_FAIL, "
        "BOOT_FAIL, OUT_OF_MEMORY, TIMEOUT, DEADLINE, PREEMPTED, CANCELLED by an admin uid in "
        "`[failures] admin_uids` or by a user), then from the job's logs (the most specific "
        "signature rule matched, root causes before implicit ones), then from the signal of a "
        "FAILED job (ExitCode's signal, else an exit code 128 + N as signal N: core dump, "
        "killed by a signal), else 'no signature'. Grain: one row per "
        "failed attempt, with the job's own VC and GPU model. Units: seconds.",
        dated_by="start_ts",
    ),
    _summary(
        "failure_reasons",
        "Failures by reason (Philly Table 7)",
        "Philly §4.2, Table 7",
        ("failure_attempts",),
        "Definition (docs/definitions.md#failures): per reason, its sources (IF, AE, U), trials "
        "(failed attempts), jobs, users, runtime to failure (50th, 90th, 95th percentiles and "
        "share of the total), trials by GPU demand (1, 2-4, >4), RTF x demand (GPU hours "
        "burned) and its share, and repetitions per job (trials / jobs) and per user (trials / "
        "users); the 'all' row repeats per (job, reason) and (user, reason). Grain: one row per "
        "VC x GPU model of the job (each with '(all)') x reason (and 'all'). Units: seconds, "
        "GPU hours, percent 0-100.",
        jobs="the jobs with a failed attempt",
    ),
    _summary(
        "failure_retries",
        "Retries and failed attempts by job size (Philly Figure 9a)",
        "Philly §4.2, Figure 9a",
        ("job_gpus", "job_usage", "failure_attempts"),
        "Definition (docs/definitions.md#failures): by size class, the jobs that ran, those "
        "with more than one attempt and their share, retries (attempts after the first: total, "
        "mean, maximum), failed attempts and the GPU hours they burned. Grain: one row per VC x "
        "GPU model of the job (each with '(all)') x size class (and 'all'). Units: GPU hours, "
        "percent 0-100.",
        jobs="the jobs that held a GPU (an attempt in job_gpus)",
    ),
    _summary(
        "energy_daily",
        "GPU energy per UTC day: kWh, kWh lost, facility kWh, kg CO2e, money",
        "issue #44 (energy)",
        ("job_gpu_usage", "job_usage"),
        "Definition (docs/definitions.md#energy): per VC x GPU model of the job x UTC day, the "
        "GPUs' energy (job_gpu_usage.energy_kwh: the energy counter's increase, else power "
        "integrated over observed time, slice-weighted on MIG) and the part lost (idle slots, "
        "never-used GPUs); facility kWh = kWh x `[energy] pue`; kg CO2e = facility kWh x "
        "`co2_g_per_kwh` / 1000; money = facility kWh x `price_per_kwh` (null where not "
        "configured). `measured_gpu_h`: the GPU hours with a power reading. Grain: one row per "
        "VC x GPU model (each with '(all)') x UTC day. Units: kWh, kg, currency, GPU hours.",
        staging=("allocation_days",),
    ),
    _summary(
        "idle_power",
        "Idle power per GPU model, measured in the data (W)",
        "issue #44 (energy)",
        ("gpu_samples",),
        "Definition (docs/definitions.md#idle-power): **choice** the 10th percentile of power "
        "over whole-GPU samples with utilization 0 and memory used at or under "
        "`idle_mem_floor_mib`, per GPU model, with the median beside and the number of "
        "samples. Grain: one row per GPU model, VC '(all)' (no '(all)' model row: a "
        "percentile over several models' samples is no model's idle power). Units: W.",
    ),
    _summary(
        "lost_by_user",
        "Jobs and GPU hours lost per user",
        "gpuwaste (the Overview's top users; CloudBrain §IV-C's kinds)",
        ("job_usage",),
        "Definition (docs/definitions.md#lost-by-user): per VC x GPU model of the job (each "
        "with '(all)') x user, the jobs, their "
        "GPU hours (job_usage.gpu_s) and those lost to idle slots and never-used GPUs "
        "[CloudBrain §IV-C] with their sum, and with `[cost]` prices the money and the money "
        "lost (null where no job of the row is priced). Grain: one row per VC x GPU model x "
        "user. Units: GPU hours, currency.",
        jobs="every job, those that never held a GPU too (under GPU model '(unknown)')",
    ),
    _summary(
        "waits_behind_idle",
        "Waits behind idle GPUs per holder's VC",
        "gpuwaste (no study reports it)",
        ("queue_idle_overlap",),
        "Definition (docs/definitions.md#waiting-behind-idle-gpus): per VC of the holder (and "
        "'(all)'), the waiting stretches of other users' jobs that idle GPUs kept waiting "
        "(blocked_gpu_s > 0), each counted once per row (a stretch waiting behind holders of "
        "two VCs counts in each VC's row and once in '(all)'), and the GPU hours they waited "
        "behind them. Grain: one row per holder's VC (and '(all)'), GPU model '(all)' only "
        "(queue_idle_overlap has no model of the holder). Units: GPU hours.",
    ),
)

BY_NAME: dict[str, Analysis] = {a.name: a for a in ANALYSES}


def per_job() -> tuple[Analysis, ...]:
    return tuple(a for a in ANALYSES if a.kind == "per_job")


def summary_order(
    analyses: tuple[Analysis, ...] = ANALYSES, kinds: tuple[Kind, ...] = ("summary",)
) -> tuple[Analysis, ...]:
    """The summaries (or the analyses of `kinds`) in an order where each runs after those it
    reads (declaration order where their inputs leave a choice)."""
    summaries = {a.name: a for a in analyses if a.kind in kinds}
    sorter: TopologicalSorter[str] = TopologicalSorter()
    for a in summaries.values():
        sorter.add(a.name, *(i for i in a.inputs if i in summaries))
    sorter.prepare()
    order: list[str] = []
    while sorter.is_active():
        ready = sorted(sorter.get_ready(), key=list(summaries).index)
        order.extend(ready)
        sorter.done(*ready)
    return tuple(summaries[n] for n in order)


PER_JOB_TABLES: tuple[str, ...] = tuple(a.name for a in per_job())
SUMMARY_TABLES: tuple[str, ...] = tuple(a.name for a in summary_order())
CLUSTER_ROW_TABLES: tuple[str, ...] = tuple(a.name for a in ANALYSES if a.kind == "cluster_rows")
# What `gpuwaste analyze` computes after the per-job pass, in its order: the summaries and the
# cluster-rows tables, each after those it reads.
AFTER_PER_JOB: tuple[Analysis, ...] = summary_order(kinds=("summary", "cluster_rows"))


def staging_tables(order: tuple[Analysis, ...]) -> dict[str, tuple[str, ...]]:
    """The staging relations the analyses of `order` read, in the order they are first read
    (each reader's in its declared order), each with its readers in that order."""
    readers: dict[str, list[str]] = {}
    for a in order:
        for name in a.staging:
            readers.setdefault(name, []).append(a.name)
    return {name: tuple(r) for name, r in readers.items()}


# Those of `gpuwaste analyze`: computed once per cluster, as a temp table of the run's
# connection, before the first of its readers (its time counted in that one's) and dropped after
# the last. A view would be computed again by every reader; and one reader's query would hold
# the staging query's intermediate rows while it runs (queue_idle_overlap's lookups of idle
# GPU-seconds, queue_span_idle: DuckDB then spills at analyze's memory limit).
STAGING_TABLES: dict[str, tuple[str, ...]] = staging_tables(AFTER_PER_JOB)


def make_staging_tables(con: duckdb.DuckDBPyConnection, analysis: str) -> None:
    """Before `analysis` runs: the staging relations it reads first, made temp tables (over the
    variables set on `con`: one cluster's)."""
    for name, readers in STAGING_TABLES.items():
        if readers[0] == analysis:
            prepare(con)
            run(con, f"create or replace temp table {name} as {load_sql(f'staging/{name}')}")


def drop_staging_tables(con: duckdb.DuckDBPyConnection, analysis: str) -> None:
    """After `analysis` ran: the staging relations it was the last to read, dropped."""
    for name, readers in STAGING_TABLES.items():
        if readers[-1] == analysis:
            run(con, f"drop table if exists {name}")


__all__ = [
    "AFTER_PER_JOB",
    "ANALYSES",
    "BY_NAME",
    "CLUSTER_ROW_TABLES",
    "PER_JOB_TABLES",
    "STAGING_TABLES",
    "SUMMARY_TABLES",
    "Analysis",
    "drop_staging_tables",
    "make_staging_tables",
    "per_job",
    "staging_tables",
    "summary_order",
]
