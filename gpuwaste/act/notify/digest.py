"""The digests: who wasted enough GPU time in the window, and the message each one gets.

`window_jobs` reads each job's GPU hours inside the window (`sql/act/digest_jobs.sql`, the period
rule of `report --by`); everything else here is pure: `user_digests` and `vc_digests` turn those
rows into messages. A job with too little data (`low_data`) is never called wasteful: it is left
out of every figure and the message says how many were left out and why.

Names from the data (users, VCs, job ids and names, states, the cluster) are untrusted: each goes
into a message through the context's `quote` (control characters escaped; for a chat webhook,
also its markup, see `webhook.escape`), while the words and links gpuwaste writes do not.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import duckdb
import polars as pl

from gpuwaste.act.advice import advise
from gpuwaste.act.job_report import job_link
from gpuwaste.act.money import amount
from gpuwaste.analyses.period import since_time
from gpuwaste.analyses.sqlfiles import load_sql, set_variables
from gpuwaste.config import NotifyConfig
from gpuwaste.errors import UsageError
from gpuwaste.text import printable
from gpuwaste.warehouse.reading import read_frame, run

SQL = "act/digest_jobs"


@dataclass(frozen=True)
class Window:
    """The half-open window [start, end) a digest covers (UTC)."""

    start: datetime
    end: datetime

    @property
    def label(self) -> str:
        fmt = "%Y-%m-%d %H:%M UTC"
        return f"{self.start.strftime(fmt)} to {self.end.strftime(fmt)}"


def resolve_window(since: str, until: str | None, now: datetime) -> Window:
    """`--until` (default: today 00:00 UTC, so every run of a day covers the same window) and
    `--since` (a length before it, e.g. `7d`, or a date/time)."""
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    end = since_time(until, now) if until else midnight
    assert end is not None
    start = since_time(since, end)
    if start is None or start >= end:
        raise UsageError(f"--since '{since}' must be before --until ({end.isoformat()}).")
    return Window(start, end)


@dataclass(frozen=True)
class WindowFigures:
    """What the digests of one cluster and window need, reduced in DuckDB (a 1 M-job window
    would cost more to hand to Python than to compute)."""

    groups: pl.DataFrame  # per user x VC x low_data: jobs and GPU hours (held, lost, ...)
    worst: pl.DataFrame  # judged jobs with lost time: each user's and each VC's `n` worst
    # per holder of idle GPUs, a user (`waited`) or a VC (`vc_waited`), column `who`: other
    # users' waits behind them and the GPU hours waited (queue_idle_overlap,
    # docs/definitions.md#waiting-behind-idle-gpus)
    waited: pl.DataFrame = field(default_factory=pl.DataFrame)
    vc_waited: pl.DataFrame = field(default_factory=pl.DataFrame)


GROUPS = """
select "user", vc, coalesce(low_data, false) as low_data, count(*) as jobs,
       sum(gpu_h) as gpu_h, sum(lost_gpu_h) as lost_gpu_h,
       sum(idle_slot_gpu_h) as idle_slot_gpu_h, sum(never_used_gpu_h) as never_used_gpu_h,
       sum(cost) as cost, sum(lost_cost) as lost_cost, count(lost_cost) as priced_jobs,
       sum(lost_energy_kwh) as lost_energy_kwh, count(lost_energy_kwh) as metered_jobs
from digest_jobs group by all
"""
WORST = """
with worst as (
    select * from digest_jobs
    where not coalesce(low_data, false) and lost_gpu_h > 0
    qualify row_number() over (partition by "user" order by lost_gpu_h desc, job_id) <= $1
         or row_number() over (partition by vc order by lost_gpu_h desc, job_id) <= $1
)
select w.*, j.name, j.state, j.running, j.gpus, j.diagnoses, j.util_mean
from worst as w
join job_usage as j on j.cluster = getvariable('cluster') and j.job_id = w.job_id
"""

# Per holder of idle GPUs, a user or a VC: other users' waits behind its idle GPUs that overlap
# the window, and the holders' own waits behind their own idle GPUs, as `report --by user|vc`
# counts them (sql/reports/waited_by.sql), under the names the digest's sentences use.
WAITED = "reports/waited_by"
WAITED_NAMES = {
    "others_waits": "waits",
    "others_waited_gpu_h": "waited_gpu_h",
    "own_waits": "own_waits",
    "own_blocked_gpu_h": "own_waited_gpu_h",
}


def _waited(con: duckdb.DuckDBPyConnection, by: str) -> pl.DataFrame:
    """Per user (`by` 'user') or per VC ('vc') of the cluster set on `con`, in its window."""
    set_variables(con, {"waste_by": by, "vc": None})
    frame = read_frame(con, load_sql(WAITED))
    return frame.select("who", *WAITED_NAMES).rename(WAITED_NAMES)


def window_figures(
    con: duckdb.DuckDBPyConnection,
    cluster: str,
    window: Window,
    n: int,
    count_looks_busy: bool = False,
) -> WindowFigures:
    """The jobs of `cluster` with GPU time in the window (`sql/act/digest_jobs.sql`), reduced to
    per-user x VC sums and the worst `n` jobs of each user and of each VC. `count_looks_busy`:
    the busy time of jobs that look busy counts as lost (`--count-looks-busy`)."""
    set_variables(
        con,
        {
            "cluster": cluster,
            "period_start": window.start,
            "period_end": window.end,
            "count_looks_busy": count_looks_busy,
        },
    )
    run(con, f"create or replace temp table digest_jobs as {load_sql(SQL)}")
    try:
        return WindowFigures(
            read_frame(con, GROUPS),
            read_frame(con, WORST, [n]),
            _waited(con, "user"),
            _waited(con, "vc"),
        )
    finally:
        run(con, "drop table digest_jobs")


@dataclass(frozen=True)
class Digest:
    """One message: to a user about their jobs, or to a VC's owners about the VC."""

    cluster: str
    kind: str  # user | vc
    about: str  # the user's or the VC's name
    subject: str
    body: str
    job_ids: tuple[str, ...]
    lost_gpu_h: float
    gpu_h: float
    lost_cost: float | None = None  # in the context's currency; None: money not shown
    cost: float | None = None

    @property
    def content_hash(self) -> str:
        text = f"{self.subject}\n{self.body}".encode()
        return hashlib.sha256(text).hexdigest()[:32]


@dataclass(frozen=True)
class DigestContext:
    """What every digest of one cluster and window shares."""

    cfg: NotifyConfig
    cluster: str
    window: Window
    min_observed_share: float  # [thresholds]: under it, a job has too little data
    currency: str | None = None  # money is shown in it; None: no [cost] prices, no money
    quote: Callable[[str], str] = printable  # a name from the data, as the channel shows text


def _share(lost: float, total: float) -> float:
    return lost / total if total > 0 else 0.0


def _costing(value: float | None, currency: str | None) -> str:
    shown = amount(value, currency)
    return f", costing {shown}" if shown else ""


def job_lines(jobs: pl.DataFrame, ctx: DigestContext) -> list[str]:
    """The worst jobs, each with its figures (and lost money), the advice for its diagnoses and
    its link."""
    out = []
    for j in jobs.iter_rows(named=True):
        util = "-" if j["util_mean"] is None else f"{j['util_mean']:.1f} %"
        state = "running" if j["running"] else j["state"]
        job, vc, state = (ctx.quote(str(v)) for v in (j["job_id"], j["vc"], state))
        name = ctx.quote(j["name"]) if j["name"] else "no name"
        out.append(
            f"* job {job} ({name}, VC {vc}, {state}, "
            f"{j['gpus']} GPU(s)): {j['lost_gpu_h']:.2f} of {j['gpu_h']:.2f} GPU hours lost "
            f"({100 * _share(j['lost_gpu_h'], j['gpu_h']):.0f} %: "
            f"{j['idle_slot_gpu_h']:.2f} h in idle slots, {j['never_used_gpu_h']:.2f} h on "
            f"never-used GPUs{_looks_busy(j)}){_costing(j['lost_cost'], ctx.currency)}; "
            f"GPU utilization {util}"
        )
        for _name, title, text in advise(j["diagnoses"]):
            out.append(f"    - {title}: {text}")
        out.append(f"    {job_link(ctx.cfg.dashboard_url, ctx.cluster, j['job_id'])}")
    return [printable(line) for line in out]


def _looks_busy(job: dict[str, Any]) -> str:
    """The part of a job's lost hours counted because it looks busy (`--count-looks-busy`)."""
    if not job.get("looks_busy"):
        return ""
    return (
        f", {job['looks_busy_gpu_h']:.2f} h that looked busy: GPU_UTIL high while the GPU's SM "
        "and tensor activity stayed near zero or its power near idle, counted as idle "
        "(--count-looks-busy)"
    )


def left_out_line(n_low: int, low_gpu_h: float, min_observed_share: float) -> list[str]:
    if n_low == 0:
        return []
    return [
        f"{n_low} job(s) ({low_gpu_h:.2f} GPU hours in the window) were left out: they have "
        f"too little data (observed under {100 * min_observed_share:.0f} % of their GPU time), "
        "so gpuwaste does not call them wasteful."
    ]


FOOTER = (
    "Lost GPU time = time in idle slots (GPU utilization 0 and no memory used for more than a "
    "minute) + time on GPUs the job never used. A job counts with the part of its GPU time "
    "inside the window. `gpuwaste job JOBID` shows any job in full."
)
MONEY_FOOTER = (
    "Money = GPU hours x the price of an hour of the GPU's model ([cost] of gpuwaste.toml, as of "
    "the last `gpuwaste analyze`), in {currency}; a GPU whose model has no price counts as "
    "nothing."
)

LOW = pl.col("low_data").fill_null(False)
TOTALS = (
    pl.col("gpu_h").filter(~LOW).sum(),
    pl.col("lost_gpu_h").filter(~LOW).sum(),
    pl.col("idle_slot_gpu_h").filter(~LOW).sum().alias("idle_gpu_h"),
    pl.col("never_used_gpu_h").filter(~LOW).sum().alias("never_gpu_h"),
    pl.col("cost").filter(~LOW).sum(),
    pl.col("lost_cost").filter(~LOW).sum(),
    pl.col("priced_jobs").filter(~LOW).sum(),
    pl.col("lost_energy_kwh").filter(~LOW).sum(),
    pl.col("metered_jobs").filter(~LOW).sum(),
    pl.col("jobs").filter(LOW).sum().alias("n_low"),
    pl.col("gpu_h").filter(LOW).sum().alias("low_gpu_h"),
)


def worst_jobs(jobs: pl.DataFrame, by: str, keep: pl.Series, n: int) -> dict[str, pl.DataFrame]:
    """Per value of `by` in `keep`: its `n` judged jobs that lost the most (most first)."""
    worst = (
        jobs.filter(~LOW & (pl.col("lost_gpu_h") > 0) & pl.col(by).is_in(keep.implode()))
        .sort([by, "lost_gpu_h", "job_id"], descending=[False, True, False])
        .group_by(by, maintain_order=True)
        .head(n)
    )
    return {str(k[0]): df for k, df in worst.partition_by(by, as_dict=True).items()}


def each_over(
    figures: WindowFigures, groups: pl.DataFrame, by: str, over: pl.Expr, n: int
) -> list[tuple[dict[str, Any], pl.DataFrame]]:
    """For each user (or VC: `by`) of `groups` whose judged totals pass `over`, in name order:
    its totals (TOTALS) and its `n` worst jobs."""
    totals = groups.group_by(by).agg(*TOTALS).filter(over).sort(by)
    worst_of = worst_jobs(figures.worst, by, totals[by], n)
    none = figures.worst.clear()
    return [(t, worst_of.get(str(t[by]), none)) for t in totals.iter_rows(named=True)]


def money_of(totals: dict[str, Any], ctx: DigestContext) -> tuple[float | None, float | None]:
    """(lost money, money held) of judged jobs, or (None, None) when money is not shown or none
    of the jobs has a price."""
    if ctx.currency is None or not totals["priced_jobs"]:
        return None, None
    return totals["lost_cost"], totals["cost"]


def held_sentence(totals: dict[str, Any], ctx: DigestContext) -> str:
    """`held X GPU hours, of which Y (Z %) were lost: ...`, and what the lost hours cost."""
    gpu_h, lost = totals["gpu_h"], totals["lost_gpu_h"]
    text = (
        f"held {gpu_h:.2f} GPU hours, of which {lost:.2f} ({100 * _share(lost, gpu_h):.0f} %) "
        f"were lost: {totals['idle_gpu_h']:.2f} in idle slots and {totals['never_gpu_h']:.2f} "
        "on GPUs never used."
    )
    lost_cost, cost = money_of(totals, ctx)
    if lost_cost is not None:
        text += (
            f" The lost GPU hours cost {amount(lost_cost, ctx.currency)} (of "
            f"{amount(cost, ctx.currency)} for all the GPU hours held)."
        )
    if totals.get("metered_jobs"):  # some GPU reported power (docs/definitions.md#energy)
        text += f" The GPUs drew {totals['lost_energy_kwh']:.2f} kWh in the lost GPU hours."
    return text


def _digest(
    kind: str,
    about: str,
    subject: str,
    opening: list[str],
    totals: dict[str, Any],
    worst: pl.DataFrame,
    ctx: DigestContext,
) -> Digest:
    """A digest: its opening lines, then the worst jobs with advice, the jobs left out, the
    footer."""
    whose = "Your" if kind == "user" else "The"
    lost_cost, cost = money_of(totals, ctx)
    lines = [
        *opening,
        "",
        f"{whose} {worst.height} job(s) that lost the most, and what to try:",
        *job_lines(worst, ctx),
        "",
        *left_out_line(totals["n_low"], totals["low_gpu_h"], ctx.min_observed_share),
        FOOTER,
        *([MONEY_FOOTER.format(currency=ctx.currency)] if lost_cost is not None else []),
    ]
    body = "\n".join(lines) + "\n"
    job_ids = tuple(worst["job_id"].to_list())
    return Digest(
        ctx.cluster, kind, about, subject, body, job_ids, totals["lost_gpu_h"],
        totals["gpu_h"], lost_cost, cost,
    )  # fmt: skip


def lost_hours(totals: dict[str, Any], ctx: DigestContext) -> str:
    """`1.25 GPU hours`, with the money lost when it is shown: `1.25 GPU hours (3.10 EUR)`."""
    lost_cost, _ = money_of(totals, ctx)
    money = f" ({amount(lost_cost, ctx.currency)})" if lost_cost is not None else ""
    return f"{totals['lost_gpu_h']:.2f} GPU hours{money}"


def _dates(window: Window) -> str:
    return f"{window.start.date()} to {window.end.date()}"


def user_digests(figures: WindowFigures, ctx: DigestContext) -> list[Digest]:
    """One digest per user whose judged jobs lost at least `min_wasted_gpu_hours` and at least
    `min_waste_share` of their GPU time in the window (judged: not `low_data`)."""
    cfg = ctx.cfg
    over = (
        (pl.col("lost_gpu_h") >= cfg.min_wasted_gpu_hours)
        & (pl.col("gpu_h") > 0)
        & (pl.col("lost_gpu_h") / pl.col("gpu_h") >= cfg.min_waste_share)
    )
    out = []
    waited = {r["who"]: r for r in figures.waited.iter_rows(named=True)}
    for t, worst in each_over(figures, figures.groups, "user", over, cfg.max_jobs_listed):
        user = str(t["user"])
        opening = [
            f"Hello {ctx.quote(user)},",
            "",
            f"From {ctx.window.label}, your jobs on cluster {ctx.quote(ctx.cluster)} "
            + held_sentence(t, ctx),
            *waited_sentence(waited.get(user), "your GPUs", "yours", "of yours", "your GPUs"),
        ]
        subject = (
            f"gpuwaste: {lost_hours(t, ctx)} lost on {ctx.quote(ctx.cluster)}, {_dates(ctx.window)}"
        )
        out.append(_digest("user", user, subject, opening, t, worst, ctx))
    return out


def waited_sentence(
    row: dict[str, Any] | None, gpus: str, theirs: str, own: str, own_gpus: str
) -> list[str]:
    """The lines on other users' waits behind a user's or a VC's idle GPUs (`gpus`: "your GPUs",
    `theirs`: "yours"), and on the holders' own waits (`own`: "of yours", "of the VC's users")
    behind their own idle GPUs (`own_gpus`: "your GPUs", "their own GPUs in the VC"), when
    there were any."""
    lines = []
    if row and row["waits"] and row["waited_gpu_h"]:
        lines.append(
            f"While {gpus} sat idle, {row['waits']} job(s) of other users waited "
            f"{row['waited_gpu_h']:.2f} GPU hours for GPUs that {theirs} could have given them."
        )
    if row and row["own_waits"] and row["own_waited_gpu_h"]:
        lines.append(
            f"{row['own_waits']} job(s) {own} waited {row['own_waited_gpu_h']:.2f} GPU hours "
            f"while {own_gpus} sat idle and could have run them."
        )
    return ["", *lines] if lines else []


def user_lines(mine: pl.DataFrame, vc: str, ctx: DigestContext) -> list[str]:
    """A VC's users by GPU hours lost (judged jobs), most first, with the money lost."""
    users = (
        mine.filter(~LOW & (pl.col("vc") == vc))
        .group_by("user")
        .agg(
            pl.col("lost_gpu_h").sum(),
            pl.col("gpu_h").sum(),
            pl.col("lost_cost").sum(),
            pl.col("priced_jobs").sum(),
        )
        .sort(["lost_gpu_h", "user"], descending=[True, False])
    )
    return [
        printable(
            f"* {ctx.quote(str(u['user']))}: {u['lost_gpu_h']:.2f} of {u['gpu_h']:.2f}"
            + _costing(u["lost_cost"] if u["priced_jobs"] else None, ctx.currency)
        )
        for u in users.iter_rows(named=True)
    ]


def vc_digests(figures: WindowFigures, ctx: DigestContext) -> list[Digest]:
    """One digest per VC that has owners in `[notify] vc_owners` and lost at least
    `min_wasted_gpu_hours` in the window: its totals, its users by GPU hours lost, its worst
    jobs."""
    cfg = ctx.cfg
    mine = figures.groups.filter(pl.col("vc").is_in(list(cfg.vc_owners)))
    over = pl.col("lost_gpu_h") >= cfg.min_wasted_gpu_hours
    out = []
    waited = {r["who"]: r for r in figures.vc_waited.iter_rows(named=True)}
    for t, worst in each_over(figures, mine, "vc", over, cfg.max_jobs_listed):
        vc = str(t["vc"])
        opening = [
            f"Owners of VC {ctx.quote(vc)},",
            "",
            f"From {ctx.window.label}, jobs of VC {ctx.quote(vc)} on cluster "
            f"{ctx.quote(ctx.cluster)} " + held_sentence(t, ctx),
            *waited_sentence(
                waited.get(vc),
                "the VC's GPUs",
                "the VC's",
                "of the VC's users",
                "their own GPUs in the VC",
            ),
            "",
            "GPU hours lost per user:",
            *user_lines(mine, vc, ctx),
        ]
        subject = (
            f"gpuwaste: VC {ctx.quote(vc)} lost {lost_hours(t, ctx)} on "
            f"{ctx.quote(ctx.cluster)}, {_dates(ctx.window)}"
        )
        out.append(_digest("vc", vc, subject, opening, t, worst, ctx))
    return out


__all__ = [
    "Digest",
    "DigestContext",
    "Window",
    "WindowFigures",
    "resolve_window",
    "user_digests",
    "vc_digests",
    "window_figures",
]
