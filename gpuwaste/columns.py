"""What each column of a result table means to a reader: its title, the unit it is shown in and
how many decimals that unit takes. One home for the titles and units that `gpuwaste report`,
`policy replay` and the dashboard show (the stored tables keep their raw columns and units:
seconds, GPU hours, percent 0-100; `--format csv|json` prints them raw for scripts).

Every column a table of the command line shows is declared here (tests/test_cli_tables.py
checks it). Another one (`gpuwaste sql`'s, a page's own) gets a title and unit from its name's
suffix (`_gpu_s`: GPU seconds shown as GPU hours, `_pct`: percent, `_mib`: MiB, `_ts`: a UTC
time), else its name in words.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class Rank(IntEnum):
    """Which columns a narrow terminal keeps: DETAIL goes first, then FIGURE, then HEADLINE
    (GPU hours, and those lost); KEY (what a row is) only when nothing else is left."""

    KEY = 0
    HEADLINE = 1
    FIGURE = 2
    DETAIL = 3


# Decimals per shown unit: one rule for each, everywhere (GPU hours 1,234.5; 12.3 %).
DECIMALS: dict[str, int] = {
    "GPU h": 1,
    "h": 1,
    "min": 1,
    "s": 0,
    "%": 1,
    "MiB": 0,
    "GiB": 1,
    "money": 2,
    "kWh": 2,
    "kg": 2,
    "count": 0,
    # a count some of whose values are fractions (GPUs weighted by MIG slices, 0.4 GPU): one
    # decimal, for the whole column (`fractional_counts`), so that a slice never reads as 0
    "fractional count": 1,
    "weight": 2,
    "W": 0,
    "kg CO2e": 1,
    "number": 2,  # a float of no declared unit
}
HOURS, MINUTES = 1 / 3600, 1 / 60
TIME_FORMAT = "%Y-%m-%d %H:%M"  # times are UTC; the column title says so once
TRUE_FALSE = ("yes", "no")  # how a boolean reads: a word, not a checkbox or `true`


@dataclass(frozen=True)
class Column:
    """`title`: the column's header as shown, with its unit; `unit`: a DECIMALS key (empty for
    text, times and booleans); `factor`: stored value x factor = the shown value (GPU seconds x
    1/3600 = GPU hours)."""

    title: str
    unit: str = ""
    factor: float = 1.0
    rank: Rank = Rank.FIGURE
    code: bool = False  # its values are codes (snake_case words): shown as `code_words`


# spatial_summary's metrics as a reader names them (`code_words`; the other codes read well with
# spaces). Their thresholds are [thresholds] settings (docs/definitions.md), named not numbered.
METRICS: dict[str, str] = {
    "mean_gpu_util": "Mean of jobs' GPU utilization (unweighted)",
    "mean_gpu_mem_util": "Mean of jobs' GPU memory used (unweighted)",
    "mean_cpu_util": "Mean of jobs' CPU utilization (unweighted)",
    "mean_host_mem_util": "Mean of jobs' host memory used (unweighted)",
    "mean_max_gpu_util": "Mean of jobs' maximum GPU utilization (unweighted)",
    "mean_max_gpu_mem_util": "Mean of jobs' maximum GPU memory used (unweighted)",
    "mean_max_cpu_util": "Mean of jobs' maximum CPU utilization (unweighted)",
    "mean_max_host_mem_util": "Mean of jobs' maximum host memory used (unweighted)",
    "pct_gpu_and_mem_under_low": "Jobs with GPU and GPU memory under the low share (%)",
    "pct_gpu_and_mem_at_most_very_low": "Jobs with GPU and GPU memory at most very low (%)",
    "pct_gpu_and_cpu_under_very_low": "Jobs with GPU and CPU under very low (%)",
    "pct_mismatch_gpu_high_cpu_low": "Jobs with GPU high, CPU low (%)",
    "pct_mismatch_cpu_high_gpu_low": "Jobs with CPU high, GPU low (%)",
    "pct_mismatch_gpu_high_mem_low": "Jobs with GPU high, GPU memory low (%)",
    "pct_mismatch_mem_high_gpu_low": "Jobs with GPU memory high, GPU low (%)",
    "pct_fluctuating": "Jobs fluctuating (%)",
    "pct_more_than_one_stable_phase": "Jobs with more than one stable phase (%)",
    "pct_phase_levels_differ_1gib": "Jobs whose phases' memory levels differ by > 1 GiB (%)",
    "pct_phase_levels_differ_8gib": "Jobs whose phases' memory levels differ by > 8 GiB (%)",
}


def code_words(value: str) -> str:
    """A code as people read it: a metric's name (METRICS), else its words with spaces and a
    list's items after ", " (`inferred_debugging` -> `inferred debugging`)."""
    named = METRICS.get(value)
    return named if named is not None else value.replace("_", " ").replace(",", ", ")


def _key(title: str) -> Column:
    return Column(title, rank=Rank.KEY)


def _gpu_h(title: str, factor: float = 1.0, rank: Rank = Rank.FIGURE) -> Column:
    return Column(title, "GPU h", factor, rank)


def _pct(title: str, rank: Rank = Rank.FIGURE) -> Column:
    return Column(title, "%", rank=rank)


def _count(title: str, rank: Rank = Rank.FIGURE) -> Column:
    return Column(title, "count", rank=rank)


def _detail(title: str, unit: str = "", factor: float = 1.0) -> Column:
    return Column(title, unit, factor, Rank.DETAIL)


JOB_ID_TITLE = "Job id"

COLUMNS: dict[str, Column] = {
    # what a row is
    "cluster": _key("Cluster"),
    "vc": _key("VC"),
    "gpu_model": _key("GPU model"),
    "model": _key("GPU model"),  # `report --by model`
    "user": _key("User"),
    "job_id": _key(JOB_ID_TITLE),
    "kind": Column("Kind", rank=Rank.KEY, code=True),
    "metric": Column("Metric", rank=Rank.KEY, code=True),
    "source": _key("Source"),
    "state": _key("State"),
    "size": _key("Size (GPUs)"),
    "size_class": _key("Size (GPUs)"),
    "gpus_requested": _key("GPUs requested"),
    "servers": _key("Servers"),
    "bucket": _key("Utilization bucket (%)"),
    "day": _key("Day (UTC)"),
    "t_s": Column("Phase at least (min)", "min", MINUTES, Rank.KEY),
    "m_gib": Column("Memory band (GiB)", "GiB", rank=Rank.KEY),
    "idle_hours": Column("Idle threshold (h)", "h", rank=Rank.KEY),
    "attempt": Column("Attempt", rank=Rank.DETAIL),
    "host": _key("Host"),
    "gpu": _key("GPU"),
    "gpu_instance": Column("MIG instance", rank=Rank.DETAIL),
    "device": _key("Device"),  # a GPU or MIG instance by name (`analyses.reads.device_of`)
    # jobs and GPUs
    "name": _detail("Job name"),
    "jobs": _count("Jobs", Rank.HEADLINE),
    "gpus": _count("GPUs"),
    "n_hosts": _count("Hosts"),
    "mig_profile": _detail("MIG profile"),
    "gpu_weight": _detail("Share of its GPU", "weight"),
    "raw_state": _detail("Scheduler state"),
    "running": _detail("Running"),
    "submit_ts": _detail("Submitted (UTC)"),
    "start_ts": Column("Start (UTC)"),
    "end_ts": Column("End (UTC)"),
    "cancel_ts": Column("Cancelled at (UTC)"),
    "reason": Column("Why", rank=Rank.HEADLINE, code=True),
    "duration_s": Column("Duration (h)", "h", HOURS),
    "queue_delay_s": _detail("Queue delay (min)", "min", MINUTES),
    # GPU time
    "gpu_s": _gpu_h("GPU hours", HOURS, rank=Rank.HEADLINE),
    "gpu_h": _gpu_h("GPU hours", rank=Rank.HEADLINE),
    "alloc_s": _gpu_h("GPU hours", HOURS, rank=Rank.HEADLINE),
    "observed_s": _gpu_h("Observed GPU hours", HOURS, Rank.DETAIL),
    "missing_s": _gpu_h("GPU hours without data", HOURS, Rank.DETAIL),
    "missing_pct": _pct("Without data (% of its time)", Rank.DETAIL),
    "busy_s": _gpu_h("Busy GPU hours", HOURS),
    "busy_gpu_h": _gpu_h("Busy GPU hours"),
    "idle_slot_s": _gpu_h("Idle-slot GPU hours", HOURS),
    "idle_slot_gpu_s": _gpu_h("Idle-slot GPU hours", HOURS),
    "idle_slot_gpu_h": _gpu_h("Idle-slot GPU hours"),
    "never_used_s": _gpu_h("Never-used GPU hours", HOURS),
    "never_used_gpu_s": _gpu_h("Never-used GPU hours", HOURS),
    "never_used_gpu_h": _gpu_h("Never-used GPU hours"),
    "idle_gpu_s": _gpu_h("Idle GPU hours", HOURS),
    "stable_gpu_s": _gpu_h("GPU hours in stable phases", HOURS),
    "lost_gpu_h": _gpu_h("GPU hours lost", rank=Rank.HEADLINE),
    "lost_pct": _pct("Lost (% of GPU hours)", Rank.HEADLINE),
    # `report --by user|vc` (sql/reports/waste_by.sql): what the holder's idle GPUs cost others
    "others_waited_gpu_h": _gpu_h("GPU hours others waited while you idled", rank=Rank.HEADLINE),
    "others_waits": _count("Others' waits behind your idle GPUs"),
    "own_blocked_gpu_h": _gpu_h("GPU hours you waited behind your own idle GPUs"),
    "gpu_minutes": Column("GPU minutes", "min"),  # per-job rows are minutes: 0.0 in GPU hours
    "alloc_gpu_h": _gpu_h("GPU hours", rank=Rank.HEADLINE),
    "missing_gpu_h": _gpu_h("GPU hours without data", rank=Rank.DETAIL),
    "observed_gpu_h": _gpu_h("Observed GPU hours", rank=Rank.DETAIL),
    "util_gpu_h": _gpu_h("Utilization-weighted GPU hours", rank=Rank.DETAIL),
    "debug_gpu_h": _gpu_h("Debugging jobs' GPU hours"),
    "failed_gpu_h": _gpu_h("Failed jobs' GPU hours"),
    "killed_gpu_h": _gpu_h("Killed jobs' GPU hours"),
    "idle_slots": _count("Idle slots"),
    # idle held versus empty (#44): memory held with no kernel, at 0 % for over a minute
    "idle_held_s": _gpu_h("Held-idle GPU hours", HOURS),
    "idle_held_gpu_s": _gpu_h("Held-idle GPU hours", HOURS),
    "idle_held_gpu_h": _gpu_h("Held-idle GPU hours"),
    "idle_empty_s": _gpu_h("Empty-idle GPU hours", HOURS, Rank.DETAIL),
    "idle_empty_gpu_h": _gpu_h("Empty-idle GPU hours", rank=Rank.DETAIL),
    "held_idle_energy_kwh": Column("Held-idle energy (kWh)", "kWh"),
    # flags (the Job page's; a name's words would read "is debug")
    "is_debug": _detail("Debugging"),
    "is_debug_declared": _detail("Declared debugging"),
    "is_debug_inferred": _detail("Inferred debugging"),
    "hit_time_limit": _detail("Hit the time limit"),
    "low_data": _detail("Too little data"),
    "never_used": Column("Never used"),
    "never_used_gpus": _count("Never-used GPUs"),
    # shares
    "idle_slot_pct_own": _pct("Idle slots (% of own GPU time)", Rank.HEADLINE),
    "never_used_pct_own": _pct("Never-used GPUs (% of own GPU time)", Rank.HEADLINE),
    "idle_slot_pct_all": _pct("Idle slots (% of all GPU time)"),
    "never_used_pct_all": _pct("Never-used GPUs (% of all GPU time)"),
    "jobs_with_never_used": _count("Jobs with a never-used GPU"),
    "share_pct": _pct("Share of jobs (%)", Rank.HEADLINE),
    "value": Column("Value (%)", "%", rank=Rank.HEADLINE),
    "pct": _pct("Stable (% of GPU time)", Rank.HEADLINE),
    "hit_time_limit_pct": _pct("Hit the time limit (% of jobs)"),
    "idle_ge_threshold_pct": _pct("Idle at or above the threshold (% of jobs)"),
    "jobs_pct": _pct("Jobs (%)"),
    "gpu_time_pct": _pct("GPU time (%)"),
    "observed_share": Column("Observed (share)", "weight", rank=Rank.DETAIL),
    "idle_share": Column("Idle (share)", "weight", rank=Rank.DETAIL),
    # utilization
    "util_mean": _pct("GPU utilization, mean (%)", Rank.HEADLINE),
    "util_max": _pct("GPU utilization, max (%)", Rank.DETAIL),
    "util_p50": _pct("GPU utilization, median (%)"),
    "util_p90": _pct("GPU utilization, p90 (%)"),
    "util_p95": _pct("GPU utilization, p95 (%)"),
    "mem_util_mean": _pct("GPU memory used, mean (%)", Rank.DETAIL),
    "mem_util_max": _pct("GPU memory used, max (%)", Rank.DETAIL),
    "cpu_util_mean": _pct("CPU utilization, mean (%)", Rank.DETAIL),
    "cpu_util_max": _pct("CPU utilization, max (%)", Rank.DETAIL),
    "host_mem_util_mean": _pct("Host memory used, mean (%)", Rank.DETAIL),
    "host_mem_util_max": _pct("Host memory used, max (%)", Rank.DETAIL),
    "interval_s": _detail("Sampling interval (s)", "s"),
    "gpu_util_pct": _pct("GPU utilization (%)", Rank.HEADLINE),
    # delays
    "delay_mean_s": Column("Mean delay (min)", "min", MINUTES),
    "delay_p50_s": Column("Median delay (min)", "min", MINUTES),
    "delay_p90_s": Column("p90 delay (min)", "min", MINUTES),
    "delay_p99_s": Column("p99 delay (min)", "min", MINUTES),
    # money ([cost])
    "cost": Column("Money", "money"),
    "gpu_cost": Column("Money", "money"),
    "lost_cost": Column("Money lost", "money"),
    # energy ([energy]: CO2e and money where its factors are set)
    "energy_kwh": Column("Energy (kWh)", "kWh", rank=Rank.HEADLINE),
    "lost_energy_kwh": Column("Energy lost (kWh)", "kWh", rank=Rank.HEADLINE),
    "co2e_kg": Column("CO2e (kg)", "kg"),
    "lost_co2e_kg": Column("CO2e lost (kg)", "kg"),
    "energy_cost": Column("Money for energy", "money"),
    "lost_energy_cost": Column("Money for energy lost", "money"),
    # policy replay
    "jobs_hit": _count("Jobs cancelled", Rank.HEADLINE),
    "reclaimed_gpu_h": _gpu_h("GPU hours reclaimed", rank=Rank.HEADLINE),
    "reclaimed_pct": _pct("Reclaimed (% of GPU hours)"),
    "wrongful_hits": _count("Wrongful cancels", Rank.HEADLINE),
    "wrongful": Column("Wrongful"),
    "work_lost_gpu_h": _gpu_h("Work lost (GPU h)"),
    "work_lost_max_gpu_h": _gpu_h("Work lost, at most (GPU h)", rank=Rank.DETAIL),
    # queueing [Philly §3.1, Table 2]: a wait's minutes, by cause
    "cause": Column("Cause", rank=Rank.HEADLINE, code=True),
    "hosts": _count("Hosts", Rank.DETAIL),
    "per_host": _detail("Most GPUs on one host", "count"),
    "vc_quota": _detail("VC quota (GPUs)", "count"),
    "wait_start": _detail("Wait start (UTC)"),
    "wait_end": _detail("Wait end (UTC)"),
    "wait_s": Column("Waiting (min)", "min", MINUTES, Rank.HEADLINE),
    "fair_share_s": _detail("Fair-share wait (min)", "min", MINUTES),
    "fragmentation_s": _detail("Fragmentation wait (min)", "min", MINUTES),
    "capacity_s": _detail("Capacity wait (min)", "min", MINUTES),
    "other_s": _detail("Other wait (min)", "min", MINUTES),
    "out_of_order": Column("Jumped the queue"),
    "stretches": _count("Waits of this cause", Rank.HEADLINE),
    "stretches_pct": _pct("Waits of this cause (% of the size's)"),
    "cause_wait_s": Column("Waiting of this cause (min)", "min", MINUTES, Rank.HEADLINE),
    "wait_pct": _pct("Waiting of this cause (% of the size's)"),
    "waits": _count("Waits, every cause", Rank.DETAIL),
    "decisions": _count("Starts", Rank.DETAIL),
    "out_of_order_pct": _pct("Out-of-order starts (%)", Rank.DETAIL),
    "fair_share_judged": _detail("Fair-share judged"),
    "holder_user": _key("Idle GPUs' user"),
    "holder_vc": _key("Idle GPUs' VC"),
    "same_vc": _detail("Same VC"),
    "same_user": _detail("Same user"),
    "blocked_gpu_s": _gpu_h("GPU hours kept waiting", HOURS, Rank.HEADLINE),
    "blocked_waits": _count("Others' waits behind idle GPUs", Rank.HEADLINE),
    "blocked_wait_gpu_h": _gpu_h("GPU hours others waited behind idle GPUs", rank=Rank.HEADLINE),
    # failures [Philly §4.2, Table 7, Figure 9a]; RTF: runtime to failure
    "exit_code": _detail("Exit code"),
    "exit_signal": _detail("Signal"),
    "runtime_s": Column("Runtime to failure (min)", "min", MINUTES),
    "sources": Column("Sources (IF, AE, U)"),
    "origin": Column("Reason from"),
    "line": _detail("Matched log line"),
    "log_path": _detail("Log file"),
    "line_no": _detail("Line", "count"),
    "log_files": _count("Log files", Rank.DETAIL),
    "trials": _count("Trials", Rank.HEADLINE),
    "users": _count("Users"),
    "rtf_p50_s": Column("RTF p50 (min)", "min", MINUTES),
    "rtf_p90_s": _detail("RTF p90 (min)", "min", MINUTES),
    "rtf_p95_s": _detail("RTF p95 (min)", "min", MINUTES),
    "rtf_pct": _pct("RTF (% of total)"),
    "trials_1gpu": _count("Trials, 1 GPU", Rank.DETAIL),
    "trials_2_4gpu": _count("Trials, 2-4 GPUs", Rank.DETAIL),
    "trials_gt4gpu": _count("Trials, >4 GPUs", Rank.DETAIL),
    "rtf_x_demand_pct": _pct("RTF x demand (%)"),
    "per_job": _detail("Repeats per job", "number"),
    "per_user": _detail("Repeats per user", "number"),
    "jobs_retried": _count("Jobs retried"),
    "retried_pct": _pct("Retried (% of jobs)"),
    "retries": _count("Retries"),
    "retries_mean": _detail("Retries per job, mean", "number"),
    "retries_max": _count("Retries, at most", Rank.DETAIL),
    "failed_attempts": _count("Failed attempts", Rank.HEADLINE),
    # energy ([energy]) and power
    "measured_gpu_h": _gpu_h("GPU hours with a power reading", rank=Rank.DETAIL),
    "facility_kwh": Column("Facility energy (kWh)", "kWh"),
    "lost_facility_kwh": Column("Facility energy lost (kWh)", "kWh"),
    "idle_power_w": Column("Idle power, p10 (W)", "W", rank=Rank.HEADLINE),
    "idle_power_median_w": Column("Idle power, median (W)", "W"),
    "samples": _count("Samples"),
    "power_mean_w": _detail("Power, mean (W)", "W"),
    # GPU memory and phases (per job, per phase)
    "held_s": Column("Memory held (h)", "h", HOURS),
    "empty_s": _detail("No memory held (h)", "h", HOURS),
    "mem_used_mean_mib": _detail("GPU memory used, mean (MiB)", "MiB"),
    "mem_used_max_mib": _detail("GPU memory used, max (MiB)", "MiB"),
    "mem_total_mib": _detail("GPU memory (MiB)", "MiB"),
    "mem_level_mib": Column("GPU memory level (MiB)", "MiB"),
    "mem_max_mib": _detail("GPU memory used, max (MiB)", "MiB"),
    "idle_mem_mib": _detail("GPU memory held idle (MiB)", "MiB"),
    "phase_level_spread_mib": _detail("Spread of phases' memory levels (MiB)", "MiB"),
    "n_phases": _count("Phases", Rank.DETAIL),
    "n_stable_phases": _count("Stable phases", Rank.DETAIL),
    "stable": Column("Stable"),
    "figures_from": _detail("Figures from"),
    "fluctuating": _detail("Fluctuating"),
    "checkpointing": _detail("Checkpointing"),
    "looks_busy": _detail("Looks busy"),
    "diagnoses": Column("Diagnoses", code=True),
    # freshness
    "ingested_at": Column("Last ingest (UTC)"),
    "watermark": Column("Ingested up to (UTC)"),
    "samples_newest": _detail("Newest sample (UTC)"),
    "analyzed_at": Column("Last analyze (UTC)"),
    "analyzed_up_to": _detail("Analyzed up to (UTC)"),
    "stale": Column("Stale", rank=Rank.HEADLINE),
    "stale_reason": Column("Why stale"),
    # ingest state and quarantine (the dashboard's pipeline tables)
    "updated_at": Column("Last ingest (UTC)"),
    "quarantined": _count("Quarantined records"),
    "records": _count("Records"),
    "last_seen": Column("Last seen (UTC)"),
    "example_location": Column("Example location"),
}

_SUFFIXES: tuple[tuple[str, str, float], ...] = (
    # (name suffix, unit, factor), the first that matches
    ("_gpu_s", "GPU h", HOURS),
    ("_gpu_h", "GPU h", 1.0),
    ("_pct", "%", 1.0),
    ("_mib", "MiB", 1.0),
    ("_gib", "GiB", 1.0),
    ("_s", "s", 1.0),
)
_UNIT_WORDS = {"GPU h": "GPU hours", "s": "s", "%": "%", "MiB": "MiB", "GiB": "GiB"}


def column(name: str) -> Column:
    """How column `name` reads: its declaration, else a title and unit from its name."""
    declared = COLUMNS.get(name)
    if declared is not None:
        return declared
    if name.startswith(("n_", "is_")) or name.endswith("_ts"):
        words = name.removeprefix("n_").removesuffix("_ts").replace("_", " ")
        if name.endswith("_ts"):
            return _detail(f"{words.capitalize()} (UTC)")
        return _detail(("Number of " if name.startswith("n_") else "") + words)
    for suffix, unit, factor in _SUFFIXES:
        if name.endswith(suffix):
            words = name.removesuffix(suffix).replace("_", " ")
            return _detail(f"{words.capitalize()} ({_UNIT_WORDS[unit]})", unit, factor)
    return _detail(name.replace("_", " ").capitalize())


def title(name: str) -> str:
    """Column `name`'s title as shown."""
    return column(name).title


def number(value: float | int, unit: str) -> str:
    """`value` in the one format of `unit`: thousands separators and the unit's fixed decimals,
    never an exponent (1,234.5 GPU hours; 0.0 rather than 4e-07)."""
    if isinstance(value, bool):
        return TRUE_FALSE[0] if value else TRUE_FALSE[1]
    if isinstance(value, int) and unit in ("", "count"):
        return f"{value:,}"
    if value != value or value in (float("inf"), float("-inf")):  # NaN, infinities
        return str(value)
    decimals = DECIMALS.get(unit or "number", DECIMALS["number"])
    shown = f"{value:,.{decimals}f}"
    return shown.lstrip("-") if not shown.strip("-0.,") else shown  # never "-0.0"


def count_unit(values: list[float | int | None]) -> str:
    """The unit a count column is shown in: "count" (whole numbers), or "fractional count" when
    one of its values is not whole (GPUs weighted by MIG slices), one format for the column."""
    fractional = any(v is not None and v == v and v % 1 for v in values)
    return "fractional count" if fractional else "count"


def byte_size(n: int) -> str:
    """A file's size for people: `512 B`, `638.8 KiB`, `535.5 MiB`, `1.2 GiB`."""
    if n < 1024:
        return f"{n} B"
    value, units = n / 1024, ["KiB", "MiB", "GiB", "TiB"]
    while value >= 1024 and len(units) > 1:
        value, units = value / 1024, units[1:]
    return f"{value:,.1f} {units[0]}"


__all__ = [
    "COLUMNS",
    "DECIMALS",
    "JOB_ID_TITLE",
    "METRICS",
    "TIME_FORMAT",
    "TRUE_FALSE",
    "Column",
    "Rank",
    "byte_size",
    "code_words",
    "column",
    "count_unit",
    "number",
    "title",
]
