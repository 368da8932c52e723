"""What each column of a result table means to a reader: its title, the unit it is shown in and
how many decimals that unit takes. One home for the titles and units that `gpuwaste report`,
`policy replay` and the dashboard show (the stored tables keep their raw columns and units:
seconds, GPU hours, percent 0-100; `--format csv|json` prints them raw for scripts).

A column not declared in COLUMNS gets a title and unit from its name's suffix (`_gpu_s`: GPU
seconds shown as GPU hours, `_pct`: percent, `_mib`: MiB, `_ts`: a UTC time), else its name in
words.
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
    "count": 0,
    "weight": 2,
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
    "kind": _key("Kind"),
    "metric": _key("Metric"),
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
    "reason": Column("Why"),
    "duration_s": Column("Duration (h)", "h", HOURS),
    "queue_delay_s": _detail("Queue delay (min)", "min", MINUTES),
    # GPU time
    "gpu_s": _gpu_h("GPU hours", HOURS, rank=Rank.HEADLINE),
    "gpu_h": _gpu_h("GPU hours", rank=Rank.HEADLINE),
    "alloc_s": _gpu_h("GPU hours", HOURS, rank=Rank.HEADLINE),
    "observed_s": _gpu_h("Observed GPU hours", HOURS, Rank.DETAIL),
    "missing_s": _gpu_h("GPU hours without data", HOURS, Rank.DETAIL),
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
    "gpu_minutes": _gpu_h("GPU hours", MINUTES),
    "alloc_gpu_h": _gpu_h("GPU hours", rank=Rank.HEADLINE),
    "missing_gpu_h": _gpu_h("GPU hours without data", rank=Rank.DETAIL),
    "observed_gpu_h": _gpu_h("Observed GPU hours", rank=Rank.DETAIL),
    "util_gpu_h": _gpu_h("Utilization-weighted GPU hours", rank=Rank.DETAIL),
    "debug_gpu_h": _gpu_h("Debugging jobs' GPU hours"),
    "failed_gpu_h": _gpu_h("Failed jobs' GPU hours"),
    "killed_gpu_h": _gpu_h("Killed jobs' GPU hours"),
    "idle_slots": _count("Idle slots"),
    # flags (the Job page's; a name's words would read "is debug")
    "is_debug": _detail("Debugging"),
    "is_debug_declared": _detail("Declared debugging"),
    "is_debug_inferred": _detail("Inferred debugging"),
    "hit_time_limit": _detail("Hit the time limit"),
    "low_data": _detail("Too little data"),
    "never_used": Column("Never used"),
    "never_used_gpus": _count("Never-used GPUs"),
    # shares
    "idle_slot_pct_own": _pct("Idle slots (% of own GPU time)"),
    "never_used_pct_own": _pct("Never-used GPUs (% of own GPU time)"),
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
    # policy replay
    "jobs_hit": _count("Jobs cancelled", Rank.HEADLINE),
    "reclaimed_gpu_h": _gpu_h("GPU hours reclaimed", rank=Rank.HEADLINE),
    "reclaimed_pct": _pct("Reclaimed (% of GPU hours)"),
    "wrongful_hits": _count("Wrongful cancels", Rank.HEADLINE),
    "wrongful": Column("Wrongful"),
    "work_lost_gpu_h": _gpu_h("Work lost (GPU h)"),
    "work_lost_max_gpu_h": _gpu_h("Work lost, at most (GPU h)", rank=Rank.DETAIL),
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
    "TIME_FORMAT",
    "TRUE_FALSE",
    "Column",
    "Rank",
    "byte_size",
    "column",
    "number",
    "title",
]
