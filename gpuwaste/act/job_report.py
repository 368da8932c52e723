"""`gpuwaste job JOBID`: one job's figures, per-GPU rows, a utilization strip and advice.

Every figure is read from the result tables `gpuwaste analyze` wrote (`job_usage`,
`job_gpu_usage`, `idle_slots`); the strip is drawn from the job's `gpu_samples` (a picture, not
a metric). `gather` does the reading; `gpu_figures`, `strip`, `render_text` and `as_dict` are pure.
A running job's figures reach as far as the samples of the last `gpuwaste analyze`; the report
says how far (`gpuwaste.analyses.freshness`).
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from gpuwaste.act.advice import advise
from gpuwaste.act.money import amount
from gpuwaste.analyses import reads
from gpuwaste.analyses.freshness import freshness
from gpuwaste.errors import GpuwasteError
from gpuwaste.render import render, safe_text
from gpuwaste.warehouse.reading import read_rows
from gpuwaste.warehouse.readonly import read_only_connection
from gpuwaste.warehouse.store import Warehouse

STRIP_WIDTH = 60
LEVELS = "▁▂▃▄▅▆▇█"  # utilization 0-12.5 %, ..., 87.5-100 %
IDLE = "·"  # the cell is mostly in an idle slot, or on a never-used GPU
NO_DATA = " "
LEGEND = (
    f"strip: one cell = {{cell}}; {LEVELS[0]}..{LEVELS[-1]} utilization 0..100 %, "
    f"{IDLE} idle slot or never-used GPU, blank no data"
)
MAX_CLOSEST = 5


class UnknownJob(GpuwasteError):
    """No such job id (exit status 2); `closest` holds the nearest known ids."""

    def __init__(self, message: str, closest: list[str]) -> None:
        super().__init__(message)
        self.closest = closest


@dataclass(frozen=True)
class JobData:
    """What the report reads for one job (frames straight from the result tables)."""

    cluster: str
    job: dict[str, Any]  # the job_usage row
    gpus: pl.DataFrame  # job_gpu_usage rows
    idle_slots: pl.DataFrame  # idle_slots rows
    samples: pl.DataFrame  # (host, gpu, ts, util), time-bucketed when long
    analyzed_up_to: datetime | None
    stale_reason: str | None
    link: str
    currency: str | None = None  # money shown in it (`act.money.shown_currency`); None: none


def job_link(dashboard_url: str, cluster: str, job_id: str) -> str:
    """The dashboard's Job page for this job (docs/dashboard.md#filters-and-links)."""
    from urllib.parse import urlencode

    return f"{dashboard_url.rstrip('/')}/job?{urlencode({'job': job_id, 'cluster': cluster})}"


# ----------------------------------------------------------------------------- reading
def closest_ids(con: duckdb.DuckDBPyConnection, job_id: str, cluster: str | None) -> list[str]:
    """Known job ids within 2 edits of `job_id`, or starting with it, nearest first."""
    rows = read_rows(
        con,
        "select job_id from job_usage where ($2::varchar is null or cluster = $2) "
        "and (levenshtein(job_id, $1) <= 2 or starts_with(job_id, $1)) "
        "group by job_id order by min(levenshtein(job_id, $1)), job_id limit $3",
        [job_id, cluster, MAX_CLOSEST],
    )
    return [r[0] for r in rows]


def _find(con: duckdb.DuckDBPyConnection, job_id: str, cluster: str | None) -> dict[str, Any]:
    jobs = reads.job(con, cluster, job_id)
    if jobs.height == 1:
        return jobs.row(0, named=True)
    if jobs.height > 1:
        names = ", ".join(jobs["cluster"].to_list())
        raise UnknownJob(
            f"job {safe_text(job_id)} is in several clusters ({names}): give --cluster.", []
        )
    closest = closest_ids(con, job_id, cluster)
    where = f" in cluster '{safe_text(cluster)}'" if cluster else ""
    hint = f"; closest: {', '.join(safe_text(c) for c in closest)}" if closest else ""
    raise UnknownJob(f"no job {safe_text(job_id)}{where}{hint}.", closest)


def gather(
    data_dir: Path,
    job_id: str,
    cluster: str | None,
    dashboard_url: str,
    currency: str | None = None,
) -> JobData:
    """Read one job's rows; UnknownJob when there is no such job (or it is ambiguous). Money is
    shown in `currency` (None: not shown)."""
    wh = Warehouse(data_dir)
    if not wh.has_files("job_usage"):
        raise GpuwasteError(f"no job_usage table in {data_dir}: run `gpuwaste analyze` first.")
    known = wh.clusters("job_usage")
    if cluster is not None and cluster not in known:
        raise GpuwasteError(
            f"no analyzed jobs for cluster '{safe_text(cluster)}' in {data_dir} "
            f"(clusters: {', '.join(known)})."
        )
    con = read_only_connection(data_dir)
    try:
        job = _find(con, job_id, cluster)
        c = job["cluster"]
        gpus = reads.job_rows(con, "job_gpu_usage", c, job_id)
        slots = reads.job_rows(con, "idle_slots", c, job_id)
        samples = reads.job_timeline(con, c, job_id) if gpus.height else pl.DataFrame()
    finally:
        con.close()
    fresh = freshness(data_dir).filter(pl.col("cluster") == c)
    up_to = fresh["analyzed_up_to"][0] if fresh.height else None
    stale = fresh["stale_reason"][0] if fresh.height else None
    link = job_link(dashboard_url, c, job_id)
    return JobData(c, job, gpus, slots, samples, up_to, stale, link, currency)


# ----------------------------------------------------------------------------- pure parts
def _label(row: dict[str, Any], multi: bool) -> str:
    """A GPU row's device name, with its attempt when the job ran more than once."""
    return reads.device_of(row) + (f" #{row['attempt']}" if multi else "")


def gpu_figures(gpus: pl.DataFrame) -> pl.DataFrame:
    """One row per GPU (x attempt) under the names gpuwaste.columns declares: the device,
    mean and max utilization (U_i [ICSE24]), memory mean/max as % of capacity, idle-slot time,
    never used, the share without data (%), from job_gpu_usage; unrounded."""
    cap = pl.when(pl.col("mem_total_mib") > 0).then(pl.col("mem_total_mib"))
    multi = gpus["attempt"].n_unique() > 1
    device = [_label(r, multi) for r in gpus.to_dicts()]
    return gpus.select(
        pl.Series("device", device, dtype=pl.String),
        "attempt",
        "host",
        "gpu",
        "gpu_instance",
        "mig_profile",
        "util_mean",
        "util_max",
        (100 * pl.col("mem_used_mean_mib") / cap).alias("mem_util_mean"),
        (100 * pl.col("mem_used_max_mib") / cap).alias("mem_util_max"),
        "idle_slot_s",
        "idle_slots",
        "never_used",
        (100 * pl.col("missing_s") / pl.col("alloc_s")).alias("missing_pct"),
    )


def gpu_rows(gpus: pl.DataFrame) -> pl.DataFrame:
    """`gpu_figures` as `--format json` gives them (its names and roundings, kept for scripts)."""
    return gpu_figures(gpus).select(
        "attempt",
        "host",
        "gpu",
        "gpu_instance",
        "mig_profile",
        pl.col("util_mean").round(1).alias("util_pct"),
        pl.col("util_max").round(1).alias("util_max_pct"),
        pl.col("mem_util_mean").round(1).alias("mem_mean_pct"),
        pl.col("mem_util_max").round(1).alias("mem_max_pct"),
        (pl.col("idle_slot_s") / 3600).round(2).alias("idle_slot_h"),
        "idle_slots",
        "never_used",
        pl.col("missing_pct").round(1),
    )


def _span(job: dict[str, Any], gpus: pl.DataFrame) -> tuple[datetime, datetime] | None:
    if gpus.height == 0:
        return None
    lo: datetime = gpus["start_ts"].min()  # type: ignore[assignment]
    hi: datetime = gpus["end_ts"].max()  # type: ignore[assignment]
    return (lo, hi) if hi > lo else None


def strip(
    samples: pl.DataFrame,
    slots: pl.DataFrame,
    never_used: bool,
    lo: datetime,
    hi: datetime,
    width: int = STRIP_WIDTH,
) -> str:
    """One GPU's utilization over [lo, hi) in `width` cells: the mean utilization of the samples
    in a cell as a bar, `IDLE` where idle slots cover at least half the cell (or the GPU was
    never used and has samples there), blank where it has no samples."""
    cell = (hi - lo).total_seconds() / width
    means: dict[int, float] = {}
    if samples.height:
        k = ((pl.col("ts") - lo).dt.total_microseconds() / 1e6 / cell).floor().cast(pl.Int64)
        per = samples.group_by(k.clip(0, width - 1).alias("k")).agg(pl.col("util").mean())
        means = dict(zip(per["k"].to_list(), per["util"].to_list(), strict=True))
    idle = [0.0] * width
    for s, e in slots.select("start_ts", "end_ts").iter_rows():
        for i in range(width):
            a = lo + timedelta(seconds=i * cell)
            b = a + timedelta(seconds=cell)
            idle[i] += max(0.0, (min(e, b) - max(s, a)).total_seconds())
    out = []
    for i in range(width):
        u = means.get(i)
        if u is None:
            out.append(NO_DATA)
        elif never_used or idle[i] >= cell / 2:
            out.append(IDLE)
        else:
            out.append(LEVELS[min(len(LEVELS) - 1, int(max(u, 0.0) / (100 / len(LEVELS))))])
    return "".join(out)


def strips(data: JobData, width: int = STRIP_WIDTH) -> list[tuple[str, str]]:
    """(label: the device's name (+ attempt), strip) for each GPU or MIG instance row of the
    job."""
    span = _span(data.job, data.gpus)
    if span is None:
        return []
    multi = data.gpus["attempt"].n_unique() > 1
    out = []
    for row in data.gpus.iter_rows(named=True):
        mine = (
            (pl.col("host") == row["host"])
            & (pl.col("gpu") == row["gpu"])
            & pl.col("gpu_instance").eq_missing(row["gpu_instance"])
        )
        in_alloc = mine & (pl.col("ts") >= row["start_ts"]) & (pl.col("ts") <= row["end_ts"])
        samples = data.samples.filter(in_alloc) if data.samples.height else data.samples
        slots = data.idle_slots.filter(mine & (pl.col("attempt") == row["attempt"]))
        out.append(
            (_label(row, multi), strip(samples, slots, bool(row["never_used"]), *span, width))
        )
    return out


def _h(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 3600:.2f} h"


def _ts(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S UTC") if value else "-"


def _debugging(job: dict[str, Any]) -> str:
    if job["is_debug_declared"]:
        return "declared"
    if job["is_debug_inferred"]:
        return "inferred (mostly idle, many idle slots)"
    return "no"


def freshness_note(data: JobData) -> str | None:
    """How far a running job's figures reach, and a warning when results are stale."""
    notes = []
    if data.job["running"]:
        notes.append(
            f"running: figures from the samples so far, up to {_ts(data.analyzed_up_to)} "
            "(the last `gpuwaste analyze`)"
        )
    if data.stale_reason:
        notes.append(f"results are older than the data: {data.stale_reason}")
    return "; ".join(notes) or None


def header_lines(data: JobData) -> list[str]:
    j = data.job
    hosts = sorted(set(data.gpus["host"].to_list())) if data.gpus.height else []
    lost = (j["idle_slot_gpu_s"] or 0.0) + (j["never_used_gpu_s"] or 0.0)
    util = "-" if j["util_mean"] is None else f"{j['util_mean']:.1f} %"
    lines = [
        f"job {j['job_id']} (cluster {data.cluster}): {j['name'] or ''}",
        f"user {j['user']}   VC {j['vc']}   state {j['state']} ({j['raw_state'] or '-'})",
        f"GPUs {j['gpus']} on {len(hosts)} host(s): {', '.join(hosts) or '-'}",
        f"submitted {_ts(j['submit_ts'])}   started {_ts(j['start_ts'])}   "
        f"ended {_ts(j['end_ts']) if not j['running'] else 'running'}",
        f"queueing delay {_h(j['queue_delay_s'])}   debugging: {_debugging(j)}",
        f"GPU time {_h(j['gpu_s'])}   GPU utilization (mean of U_i) {util}   "
        f"lost (idle slots + never used) {_h(lost)}",
    ]
    lost_money = amount(j.get("lost_cost"), data.currency)
    if lost_money is not None:
        lines.append(
            f"money lost {lost_money} of {amount(j.get('gpu_cost'), data.currency)} "
            "(GPU hours x the [cost] price of the GPU's model)"
        )
    if j["low_data"]:
        lines.append(
            f"too little data: observed {100 * (j['observed_share'] or 0):.0f} % of its GPU "
            "time, so it gets no diagnosis"
        )
    note = freshness_note(data)
    if note:
        lines.append(note)
    return [safe_text(line) for line in lines]


def advice_lines(data: JobData) -> list[str]:
    found = advise(data.job["diagnoses"])
    if not found:
        return ["diagnoses: none"]
    out = ["diagnoses and what to try:"]
    for _name, title, text in found:  # the title people read, as the digests word it
        out.append(f"- {title}: {text}")
    return out


def gpu_table(gpus: pl.DataFrame, width: int | None = None) -> list[str]:
    """`gpu_figures` as the shared renderer's table (gpuwaste.render: the columns' titles and
    one number format per unit, as every table of the command line), one line per GPU."""
    shown = gpu_figures(gpus).drop("attempt", "host", "gpu", "gpu_instance", "mig_profile")
    out = io.StringIO()
    render(shown, out=out, key=["device"], width=width, max_rows=shown.height, raw="--format json")
    return out.getvalue().rstrip("\n").splitlines()


def render_text(data: JobData, width: int = STRIP_WIDTH) -> str:
    """The whole report as terminal text."""
    out = [*header_lines(data), ""]
    if data.gpus.height:
        out += gpu_table(data.gpus)
        span = _span(data.job, data.gpus)
        rows = strips(data, width)
        if span and rows:
            pad = max(len(label) for label, _ in rows)
            cell = timedelta(seconds=round((span[1] - span[0]).total_seconds() / width))
            out.append("")
            out.append(f"{'':{pad}}  {_ts(span[0])} -> {_ts(span[1])}")
            out.extend(f"{safe_text(label):{pad}} |{s}|" for label, s in rows)
            out.append(LEGEND.format(cell=cell))
    else:
        out.append("no GPU rows (the job never started, or has no allocation)")
    out += ["", *advice_lines(data), f"dashboard: {data.link}"]
    return "\n".join(out) + "\n"


def as_dict(data: JobData, width: int = STRIP_WIDTH) -> dict[str, Any]:
    """The report for `--format json`."""
    return {
        "cluster": data.cluster,
        "job": data.job,
        "gpus": [{"device": reads.device_of(r), **r} for r in gpu_rows(data.gpus).to_dicts()],
        "strips": [{"gpu": label, "strip": s} for label, s in strips(data, width)],
        "diagnoses": [
            {"name": n, "title": t, "advice": a} for n, t, a in advise(data.job["diagnoses"])
        ],
        "freshness": freshness_note(data),
        "analyzed_up_to": data.analyzed_up_to,
        "currency": data.currency,
        "link": data.link,
    }


__all__ = [
    "JobData",
    "UnknownJob",
    "as_dict",
    "closest_ids",
    "gather",
    "gpu_rows",
    "job_link",
    "render_text",
    "strip",
    "strips",
]
