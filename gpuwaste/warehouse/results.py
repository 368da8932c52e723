"""Result tables written by `gpuwaste analyze`: the contract between analyses and the dashboard.

Declared here, in the warehouse, so that every process sees the same catalog whatever it imported;
`gpuwaste.analyses.registry` names, for each table, the analysis that computes it.

Each table is one file per (cluster, key) under `<data_dir>/parquet/<table>/cluster=<c>/`.
Summary tables carry a `vc` column in which the value `ALL_VCS` ("(all)") is every VC together,
and a `gpu_model` column (the job's GPU model) in which `ALL_MODELS` ("(all)") is every model
together: the rows of `gpu_model = '(all)'` are the summaries' rows without the model split.
Percentages are 0-100; durations are seconds; memory is MiB unless the name says otherwise.
"""

from __future__ import annotations

import polars as pl

from gpuwaste.warehouse.table import DEVICE_COLUMNS, DEVICE_KEY, UTC_TS, Table

ALL_VCS = "(all)"
ALL_MODELS = "(all)"  # every GPU model together: the summaries' rows before the model split
UNKNOWN_MODEL = "(unknown)"  # no source names the model of the job's devices
MIXED_MODELS = "mixed"  # a job whose devices name two or more models
SUMMARY_GRAIN = ("vc", "gpu_model")  # the first columns of every summary's key
# The SQL variables the summaries' files (and the policy replay's) label their roll-up rows with:
# `getvariable('all_vcs')` where `cube(vc, gpu_model)` rolled the VC up. Whatever runs those files
# sets them from here, so that the label is defined once.
ROLLUP_LABELS: dict[str, str] = {"all_vcs": ALL_VCS, "all_models": ALL_MODELS}
# The columns whose roll-up rows carry a label, and the label: a table for people leaves out the
# roll-up rows that repeat their only member (gpuwaste.render.single_member_rollups).
ROLLUP_COLUMNS: dict[str, str] = {"vc": ALL_VCS, "gpu_model": ALL_MODELS}
SIZE_CLASSES = ("1", "2-4", "5-8", ">8")

STRING, FLOAT, INT, BOOL = pl.String(), pl.Float64(), pl.Int64(), pl.Boolean()


def _result(name: str, doc: str, key: tuple[str, ...], /, **cols: pl.DataType) -> Table:
    return Table(
        name, {"cluster": STRING, **cols}, layout="cluster", key=key, sort=key, doc=doc, result=True
    )


def _summary(name: str, doc: str, key: tuple[str, ...], /, **cols: pl.DataType) -> Table:
    """A summary table: its grain starts with SUMMARY_GRAIN (VC, then the job's GPU model),
    each with its '(all)' roll-up."""
    return _result(name, doc, (*SUMMARY_GRAIN, *key), vc=STRING, gpu_model=STRING, **cols)


JOB_GPU_USAGE = _result(
    "job_gpu_usage",
    "One row per job x attempt x device (a GPU or a MIG instance) [ICSE24 §3.2, CloudBrain "
    "§IV-C]. idle_slot_s + never_used_s + busy_s + missing_s = alloc_s. The seconds are GPU "
    "seconds: wall seconds x gpu_weight (the MIG slice's share of its GPU, 1 for a whole GPU).",
    DEVICE_KEY,
    **DEVICE_COLUMNS,
    gpu_model=STRING,
    gpu_weight=FLOAT,
    start_ts=UTC_TS,
    end_ts=UTC_TS,
    alloc_s=FLOAT,
    observed_s=FLOAT,
    missing_s=FLOAT,
    busy_s=FLOAT,
    idle_slot_s=FLOAT,
    # idle held versus empty (#44, docs/definitions.md): held = stretches over idle_slot_min_s
    # of utilization 0 with memory above the floor (busy time for the studies); empty = the
    # idle-slot time. held + empty = the zero-utilization time in stretches over the minimum
    idle_held_s=FLOAT,
    idle_empty_s=FLOAT,
    idle_slots=INT,
    never_used=BOOL,
    never_used_s=FLOAT,
    util_mean=FLOAT,
    util_max=FLOAT,
    mem_used_mean_mib=FLOAT,
    mem_used_max_mib=FLOAT,
    mem_total_mib=FLOAT,
    n_phases=INT,
    n_stable_phases=INT,
    interval_s=FLOAT,  # the sampling interval the gaps were judged by
    figures_from=STRING,  # "samples", "jobstats-summary" (no sample: the job's summary), null
    low_data=BOOL,
    gpu_cost=FLOAT,  # [cost] price x GPU hours (null without a price for its model)
    lost_cost=FLOAT,  # the same for idle-slot + never-used GPU hours
    # energy (docs/definitions.md#energy): kWh of the device, slice-weighted on MIG; null where
    # it has no power or energy reading, never 0
    energy_kwh=FLOAT,
    lost_energy_kwh=FLOAT,  # during idle slots, or all of it on a never-used device
    held_idle_energy_kwh=FLOAT,  # during held-idle stretches (not part of lost_energy_kwh)
    power_mean_w=FLOAT,  # the device's mean power over the seconds with a reading (not weighted)
)

JOB_UTIL_HIST = _result(
    "job_util_hist",
    "Per job: GPU-minutes by per-minute GPU utilization bucket (0..100), the input of Philly "
    "Table 3, Table 5 and Figure 5 (minutes counted from each attempt's start).",
    ("job_id", "bucket"),
    job_id=STRING,
    bucket=pl.Int16(),
    gpu_minutes=FLOAT,
)

JOB_USAGE = _result(
    "job_usage",
    "One row per job: the GPU rows rolled up, host CPU and memory, flags and diagnoses.",
    ("job_id",),
    job_id=STRING,
    user=STRING,
    vc=STRING,
    gpu_model=STRING,  # its devices' model; MIXED_MODELS when several, UNKNOWN_MODEL when none
    name=STRING,
    state=STRING,
    raw_state=STRING,
    running=BOOL,
    gpus=INT,
    size_class=STRING,
    n_hosts=INT,
    is_debug=BOOL,
    is_debug_declared=BOOL,
    is_debug_inferred=BOOL,
    submit_ts=UTC_TS,
    start_ts=UTC_TS,
    end_ts=UTC_TS,
    duration_s=FLOAT,
    queue_delay_s=FLOAT,
    gpu_s=FLOAT,
    observed_share=FLOAT,
    low_data=BOOL,
    util_mean=FLOAT,
    util_max=FLOAT,
    mem_util_mean=FLOAT,
    mem_util_max=FLOAT,
    cpu_util_mean=FLOAT,
    cpu_util_max=FLOAT,
    host_mem_util_mean=FLOAT,
    host_mem_util_max=FLOAT,
    idle_slot_gpu_s=FLOAT,
    idle_slots=INT,
    idle_held_gpu_s=FLOAT,  # #44: held-idle GPU seconds (job_gpu_usage.idle_held_s summed)
    never_used_gpu_s=FLOAT,
    never_used_gpus=INT,
    idle_share=FLOAT,
    n_phases=INT,
    n_stable_phases=INT,
    phase_level_spread_mib=FLOAT,
    fluctuating=BOOL,
    checkpointing=BOOL,
    hit_time_limit=BOOL,
    looks_busy=BOOL,  # #44: GPU_UTIL high while SM/tensor or power near idle; null: not judged
    diagnoses=STRING,
    gpu_cost=FLOAT,  # sum over its GPUs ([cost]); null when no GPU of the job has a price
    lost_cost=FLOAT,
    energy_kwh=FLOAT,  # sum over its GPUs with a reading; null when none has one
    lost_energy_kwh=FLOAT,
    held_idle_energy_kwh=FLOAT,
)

IDLE_SLOTS = _result(
    "idle_slots",
    "One row per idle slot: a run of util = 0 and memory <= floor longer than the minimum "
    "[CloudBrain §IV-C]. Never-used GPUs have none (their whole time is never-used).",
    (*DEVICE_KEY, "start_ts"),
    **DEVICE_COLUMNS,
    start_ts=UTC_TS,
    end_ts=UTC_TS,
    duration_s=FLOAT,
)

STABLE_PHASES = _result(
    "stable_phases",
    "One row per memory phase of a job x GPU [CloudBrain §IV-B]; `stable` under the default "
    "smallest (t, m); the grid table has every (t, m).",
    (*DEVICE_KEY, "start_ts"),
    **DEVICE_COLUMNS,
    start_ts=UTC_TS,
    end_ts=UTC_TS,
    duration_s=FLOAT,
    mem_level_mib=FLOAT,
    mem_max_mib=FLOAT,
    mem_total_mib=FLOAT,
    idle_mem_mib=FLOAT,
    stable=BOOL,
)

WASTE_BY_VC = _summary(
    "waste_by_vc",
    "CloudBrain Table IV per VC: idle-slot and never-used GPU time among own jobs and among all.",
    ("kind",),
    kind=STRING,  # kind: debugging | non-debugging | total
    jobs=INT,
    gpu_s=FLOAT,
    idle_slot_gpu_s=FLOAT,
    never_used_gpu_s=FLOAT,
    idle_slot_pct_own=FLOAT,
    never_used_pct_own=FLOAT,
    idle_slot_pct_all=FLOAT,
    never_used_pct_all=FLOAT,
)

NEVER_USED_BY_SIZE = _summary(
    "never_used_by_size",
    "CloudBrain Table V: jobs with at least one never-used GPU, by GPUs requested.",
    ("gpus_requested",),
    gpus_requested=STRING,  # 1 | 2 | 4 | 8 | 16 | other
    jobs=INT,
    jobs_with_never_used=INT,
    share_pct=FLOAT,
)

STABLE_PHASE_GRID = _summary(
    "stable_phase_grid",
    "CloudBrain Table III: percent of all GPU time in stable phases for each (t, m).",
    ("t_s", "m_gib"),
    t_s=FLOAT,
    m_gib=FLOAT,
    stable_gpu_s=FLOAT,
    gpu_s=FLOAT,
    pct=FLOAT,
)

SPATIAL_SUMMARY = _summary(
    "spatial_summary",
    "CloudBrain §IV-A/B: means and maxima, threshold shares, mismatch shares, fluctuating jobs. "
    "One row per (vc, metric); value is a percent of jobs, or a mean percent for 'mean_*'.",
    ("metric",),
    metric=STRING,
    value=FLOAT,
    jobs=INT,
)

DEBUG_JOBS = _summary(
    "debug_jobs",
    "CloudBrain §IV-C1: debugging jobs, declared and inferred kept apart.",
    ("kind",),
    kind=STRING,  # declared | inferred | any
    jobs=INT,
    gpu_s=FLOAT,
    hit_time_limit_pct=FLOAT,
    idle_ge_threshold_pct=FLOAT,
    idle_gpu_s=FLOAT,
)

UTIL_BY_SIZE_STATUS = _summary(
    "util_by_size_status",
    "Philly Table 3: GPU utilization (time-weighted mean) by job size x final status.",
    ("size", "state"),
    size=STRING,
    state=STRING,
    jobs=INT,
    gpu_minutes=FLOAT,
    util_mean=FLOAT,
)

UTIL_MINUTE_HIST = _summary(
    "util_minute_hist",
    "Philly Figure 5: per-minute GPU utilization histogram (1-point buckets 0..100) by size "
    "class x state; cumulate for the CDF.",
    ("size", "state", "bucket"),
    size=STRING,
    state=STRING,
    bucket=pl.Int16(),
    gpu_minutes=FLOAT,
)

UTIL_BY_SPREAD = _summary(
    "util_by_spread",
    "Philly Table 5: GPU utilization of 16-GPU jobs by number of servers.",
    ("servers",),
    servers=INT,
    jobs=INT,
    util_mean=FLOAT,
    util_p50=FLOAT,
    util_p90=FLOAT,
    util_p95=FLOAT,
)

JOBS_BY_STATUS = _summary(
    "jobs_by_status",
    "Philly Table 6: jobs and GPU time by final status.",
    ("state",),
    state=STRING,
    jobs=INT,
    jobs_pct=FLOAT,
    gpu_s=FLOAT,
    gpu_time_pct=FLOAT,
)

QUEUEING_DELAY = _summary(
    "queueing_delay",
    "Philly §3: delay from submission to first start, by size class and VC.",
    ("size_class",),
    size_class=STRING,
    jobs=INT,
    delay_mean_s=FLOAT,
    delay_p50_s=FLOAT,
    delay_p90_s=FLOAT,
    delay_p99_s=FLOAT,
)

QUEUE_CAUSES = _result(
    "queue_causes",
    "One row per start of a job's attempt (a scheduling decision) [Philly §3.1]: the waiting "
    "stretch before it, its seconds by cause (fair-share, fragmentation, capacity, other), its "
    "cause (that of most of its seconds; null when it did not wait) and whether the start "
    "jumped the queue.",
    ("job_id", "attempt"),
    job_id=STRING,
    attempt=pl.Int16(),
    user=STRING,
    vc=STRING,
    gpu_model=STRING,
    size_class=STRING,
    gpus=FLOAT,  # slice-weighted GPUs of the attempt
    hosts=INT,
    per_host=FLOAT,  # the most GPUs it had on one host
    vc_quota=FLOAT,  # [clusters.vc_quotas]; null: fair-share not judged
    wait_start=UTC_TS,
    wait_end=UTC_TS,
    wait_s=FLOAT,
    fair_share_s=FLOAT,
    fragmentation_s=FLOAT,
    capacity_s=FLOAT,
    other_s=FLOAT,
    cause=STRING,
    out_of_order=BOOL,
)

QUEUE_CAUSE_SUMMARY = _summary(
    "queue_cause_summary",
    "Philly Table 2: waiting stretches and waiting time by cause and size class, shares of "
    "occurrences and of time; the share of out-of-order starts beside.",
    ("size_class", "cause"),
    size_class=STRING,
    cause=STRING,
    stretches=INT,
    stretches_pct=FLOAT,
    cause_wait_s=FLOAT,
    wait_pct=FLOAT,
    waits=INT,
    wait_s=FLOAT,
    decisions=INT,
    out_of_order_pct=FLOAT,
    fair_share_judged=BOOL,
)

QUEUE_IDLE_OVERLAP = _result(
    "queue_idle_overlap",
    "One row per waiting stretch x holder of idle GPUs: the GPU-seconds allocated to the "
    "holder's jobs and idle (idle slots, never-used GPUs) while the stretch waited, and of "
    "them the GPU-seconds that kept it waiting.",
    ("job_id", "attempt", "holder_user", "holder_vc"),
    job_id=STRING,
    attempt=pl.Int16(),
    user=STRING,
    vc=STRING,
    gpus=FLOAT,
    wait_start=UTC_TS,
    wait_end=UTC_TS,
    wait_s=FLOAT,
    holder_user=STRING,
    holder_vc=STRING,
    same_vc=BOOL,
    same_user=BOOL,
    idle_gpu_s=FLOAT,
    blocked_gpu_s=FLOAT,
)

WASTE_DAILY = _summary(
    "waste_daily",
    "GPU hours per UTC day by kind, for the dashboard's trend: allocated, busy, idle-slot, "
    "never-used, no-data, observed, utilization-weighted (GPU utilization, time-weighted mean = "
    "util_gpu_h / observed_gpu_h), and the GPU time of debugging, failed and killed jobs.",
    ("day",),
    day=pl.Date(),
    alloc_gpu_h=FLOAT,
    busy_gpu_h=FLOAT,
    idle_slot_gpu_h=FLOAT,
    never_used_gpu_h=FLOAT,
    missing_gpu_h=FLOAT,
    observed_gpu_h=FLOAT,
    util_gpu_h=FLOAT,
    debug_gpu_h=FLOAT,
    failed_gpu_h=FLOAT,
    killed_gpu_h=FLOAT,
)

WASTE_BY_MODEL = _summary(
    "waste_by_model",
    "Per VC x GPU model: GPU hours allocated, busy, idle-slot, never-used and lost, share lost, "
    "GPU utilization (time-weighted mean). Slice-weighted on MIG.",
    (),
    jobs=INT,
    gpu_h=FLOAT,
    busy_gpu_h=FLOAT,
    idle_slot_gpu_h=FLOAT,
    never_used_gpu_h=FLOAT,
    lost_gpu_h=FLOAT,
    lost_pct=FLOAT,
    gpu_util_pct=FLOAT,
    cost=FLOAT,  # [cost]: GPU hours x price of the model; null without a price
    lost_cost=FLOAT,
)

FAILURE_ATTEMPTS = _result(
    "failure_attempts",
    "Philly §4.2: one row per failed attempt: its reason, where the reason came from "
    "(scheduler | log | exit status | none), the matched log line, runtime to failure and GPU "
    "time burned. `vc` and `gpu_model` are the job's own (no '(all)' rows).",
    ("job_id", "attempt"),
    job_id=STRING,
    attempt=pl.Int16(),
    user=STRING,
    vc=STRING,
    gpu_model=STRING,
    raw_state=STRING,
    exit_code=pl.Int32(),
    exit_signal=pl.Int32(),
    start_ts=UTC_TS,
    end_ts=UTC_TS,
    gpus=INT,
    runtime_s=FLOAT,
    gpu_s=FLOAT,
    reason=STRING,
    sources=STRING,  # IF, AE, U joined by ','
    origin=STRING,
    line=STRING,
    log_path=STRING,
    line_no=INT,
    log_files=INT,
)

# How failure_reasons lists its rows within each cluster, VC and model (SQL ORDER BY terms), as
# Philly's Table 7 does: the reasons with the most trials first (ties by name, whatever its
# case), the 'all' row last. Read by `gpuwaste report` and the dashboard alike.
FAILURE_REASONS_ORDER = "reason = 'all', trials DESC, lower(reason)"

FAILURE_REASONS = _summary(
    "failure_reasons",
    "Philly Table 7: failed attempts by reason (and 'all'): sources, trials, jobs, users, "
    "runtime to failure percentiles and share, trials by GPU demand, GPU hours burned (RTF x "
    "demand) and share, repetitions per job and per user.",
    ("reason",),
    reason=STRING,
    sources=STRING,
    trials=INT,
    jobs=INT,
    users=INT,
    rtf_p50_s=FLOAT,
    rtf_p90_s=FLOAT,
    rtf_p95_s=FLOAT,
    rtf_pct=FLOAT,
    trials_1gpu=INT,
    trials_2_4gpu=INT,
    trials_gt4gpu=INT,
    gpu_h=FLOAT,
    rtf_x_demand_pct=FLOAT,
    per_job=FLOAT,
    per_user=FLOAT,
)

FAILURE_RETRIES = _summary(
    "failure_retries",
    "Philly Figure 9a: jobs, retries and failed attempts (with their GPU hours) by size class.",
    ("size_class",),
    size_class=STRING,
    jobs=INT,
    jobs_retried=INT,
    retried_pct=FLOAT,
    retries=INT,
    retries_mean=FLOAT,
    retries_max=INT,
    failed_attempts=INT,
    failed_gpu_h=FLOAT,
)

ENERGY_DAILY = _summary(
    "energy_daily",
    "Per VC x GPU model x UTC day: the GPUs' energy (kWh, slice-weighted on MIG), the part lost "
    "(idle slots and never-used GPUs), the facility's (x [energy] pue), kg CO2e (x "
    "co2_g_per_kwh) and the money (x price_per_kwh): null where not configured. measured_gpu_h: "
    "the GPU hours whose devices have a power reading (the rest has no energy, not 0).",
    ("day",),
    day=pl.Date(),
    gpu_h=FLOAT,
    measured_gpu_h=FLOAT,
    energy_kwh=FLOAT,
    lost_energy_kwh=FLOAT,
    facility_kwh=FLOAT,
    lost_facility_kwh=FLOAT,
    co2e_kg=FLOAT,
    lost_co2e_kg=FLOAT,
    energy_cost=FLOAT,
    lost_energy_cost=FLOAT,
)

IDLE_POWER = _summary(
    "idle_power",
    "Per GPU model (VC '(all)'; no '(all)' model row): the idle power measured in the data, the "
    "10th percentile of the "
    "power of whole-GPU samples with utilization 0 and no memory held (the estimator of "
    "docs/definitions.md#idle-power), its median beside, and how many samples it is from.",
    (),
    idle_power_w=FLOAT,
    idle_power_median_w=FLOAT,
    samples=INT,
)

LOST_BY_USER = _summary(
    "lost_by_user",
    "Per VC x GPU model of the job x user: jobs, GPU hours, those lost to idle slots and "
    "never-used GPUs (and their sum), and with [cost] prices the money (null where nothing is "
    "priced): the dashboard Overview's job and user counts and top users and VCs.",
    ("user",),
    user=STRING,
    jobs=INT,
    gpu_h=FLOAT,
    idle_slot_gpu_h=FLOAT,
    never_used_gpu_h=FLOAT,
    lost_gpu_h=FLOAT,
    cost=FLOAT,
    lost_cost=FLOAT,
)

WAITS_BEHIND_IDLE = _summary(
    "waits_behind_idle",
    "Per VC of the holder (and '(all)'; GPU model '(all)' only): other users' waiting stretches "
    "that idle GPUs kept waiting, each counted once per row, and the GPU hours they waited "
    "behind them (queue_idle_overlap.blocked_gpu_s summed).",
    (),
    blocked_waits=INT,
    blocked_wait_gpu_h=FLOAT,
)

RESULT_TABLES: dict[str, Table] = {
    t.name: t
    for t in (
        JOB_GPU_USAGE,
        JOB_UTIL_HIST,
        JOB_USAGE,
        IDLE_SLOTS,
        STABLE_PHASES,
        WASTE_BY_VC,
        WASTE_BY_MODEL,
        NEVER_USED_BY_SIZE,
        STABLE_PHASE_GRID,
        SPATIAL_SUMMARY,
        DEBUG_JOBS,
        UTIL_BY_SIZE_STATUS,
        UTIL_MINUTE_HIST,
        UTIL_BY_SPREAD,
        JOBS_BY_STATUS,
        QUEUEING_DELAY,
        QUEUE_CAUSES,
        QUEUE_CAUSE_SUMMARY,
        QUEUE_IDLE_OVERLAP,
        WASTE_DAILY,
        FAILURE_ATTEMPTS,
        FAILURE_REASONS,
        FAILURE_RETRIES,
        ENERGY_DAILY,
        IDLE_POWER,
        LOST_BY_USER,
        WAITS_BEHIND_IDLE,
    )
}

__all__ = [
    "ALL_MODELS",
    "ALL_VCS",
    "MIXED_MODELS",
    "RESULT_TABLES",
    "ROLLUP_COLUMNS",
    "ROLLUP_LABELS",
    "SIZE_CLASSES",
    "SUMMARY_GRAIN",
    "UNKNOWN_MODEL",
]
