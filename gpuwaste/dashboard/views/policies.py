"""Policies: what a cancel rule (cancel a job once all its GPUs have been idle for H hours; cap
interactive jobs' run time) would have reclaimed and broken, replayed over the analyzed history
for a sweep of H: the chart (reclaimed vs work lost by wrongful hits) and the table per VC, then
the jobs one threshold would have cancelled. Definitions: docs/analyses.md, "Replaying
enforcement rules"; the same replay as `gpuwaste policy replay`."""

from __future__ import annotations

import polars as pl
import streamlit as st

from gpuwaste.act.policy.rule import Only, make_rule
from gpuwaste.dashboard import charts, data, widgets
from gpuwaste.dashboard import queries as q
from gpuwaste.dashboard.filters import Filters
from gpuwaste.errors import GpuwasteError
from gpuwaste.warehouse.results import ALL_VCS

ADDITIVE = (
    "jobs", "gpu_h", "jobs_hit", "reclaimed_gpu_h", "wrongful_hits", "work_lost_gpu_h",
    "work_lost_max_gpu_h",
)  # fmt: skip
TITLES = {
    "idle_hours": "Idle for (hours)",
    "vc": "VC",
    "jobs": "Jobs",
    "gpu_h": "GPU hours",
    "jobs_hit": "Jobs hit",
    "reclaimed_gpu_h": "Reclaimed GPU hours",
    "reclaimed_pct": "Reclaimed %",
    "wrongful_hits": "Wrongful hits",
    "work_lost_gpu_h": "Work lost GPU hours",
    "work_lost_max_gpu_h": "Work lost, at most (GPU hours)",
    "cancel_ts": "Cancel at (UTC)",
    "reason": "Why",
    "wrongful": "Wrongful",
}


def chart_rows(sweep: pl.DataFrame, vcs: tuple[str, ...]) -> pl.DataFrame:
    """One row per threshold: the selected VCs summed, else the '(all)' rows."""
    if not vcs:
        return sweep.filter(pl.col("vc") == ALL_VCS)
    return (
        sweep.filter(pl.col("vc").is_in(vcs))
        .group_by("idle_hours")
        .agg(pl.col(c).sum() for c in ADDITIVE)
        .sort("idle_hours")
    )


f = widgets.current_filters()
st.title("Policies")
widgets.show_view(f)
st.caption(
    "Replays a cancel rule over the analyzed history: a job is cancelled at the first moment, "
    "after the grace, at which every GPU it holds has been idle (the analyses' idle slots, or "
    "never used) for the threshold; interactive jobs (declared by the scheduler) can also be "
    "capped. A **wrongful hit** is a job whose GPUs became busy again after the cancel point; "
    "its **work lost** is that busy GPU time. Cluster, VC and period (jobs started in it) apply; "
    "GPU model, user, size and state do not. Same figures as `gpuwaste policy replay`."
)

asked = widgets.link_values(("idle_hours", "grace", "only", "cap"))
c1, c2, c3, c4 = st.columns([3, 2, 2, 2])
with c1:
    hours_text = st.text_input("Idle thresholds (hours)", data.POLICY_HOURS, key="idle_hours",
                               bind="query-params", help="Comma-separated: one replay each.")  # fmt: skip
with c2:
    grace = st.number_input("Grace after start (min)", min_value=0.0, value=0.0, step=15.0,
                            key="grace", bind="query-params")  # fmt: skip
with c3:
    only = st.selectbox("Jobs replayed", list(Only.__members__), index=2, key="only",
                        bind="query-params",
                        help="debugging: declared or inferred; interactive: declared by the "
                        "scheduler (debug partition, QoS, shell or Jupyter name).")  # fmt: skip
with c4:
    cap = st.number_input("Interactive jobs at most (h)", min_value=0.0, value=0.0, step=1.0,
                          key="cap", bind="query-params", help="0: no limit.")  # fmt: skip

try:
    rule = make_rule([hours_text or ""], float(grace), str(only), float(cap) or None)
except GpuwasteError as exc:  # it quotes the URL's ?idle_hours=: Markdown made text
    st.warning(widgets.plain(str(exc)), icon=":material/info:")
    st.stop()
widgets.warn_link_fallbacks(
    asked,
    {
        "idle_hours": f"thresholds {hours_text}",
        "grace": f"a grace of {grace:g} min",
        "only": f"only {only}",
        "cap": "no limit" if not cap else f"at most {cap:g} h",
    },
)

sweep, cancelled = data.replay(rule, f)  # one pass gives both (and is warmed as the page opens)
if f.vcs:
    sweep = sweep.filter(pl.col("vc").is_in(f.vcs) | (pl.col("vc") == ALL_VCS))
rows = chart_rows(sweep, f.vcs)
if rows.height == 0 or rows["jobs"].sum() == 0:
    st.info("No job with GPU time started in this view.")
    st.stop()

widgets.plot(charts.policy_sweep(rows), key="policy_sweep")
if f.start is None and rule.only == Only.all:  # count jobs as the other pages do, or say why not
    replayed = max((int(v) for v in rows["jobs"].to_list()), default=0)
    in_view = int(data.fetch(q.job_counts, Filters(cluster=f.cluster, vcs=f.vcs))["jobs"][0])
    if replayed < in_view:
        st.caption(
            f"The replay counts the {replayed:,} jobs with GPU time; the other "
            f"{in_view - replayed:,} of the {in_view:,} jobs in these VCs held no GPU (ended "
            "before one was allocated), so no rule could cancel them."
        )
shown = sweep.drop("cluster") if f.cluster else sweep
widgets.table(
    widgets.readable(shown, titles=TITLES),
    name="policy replay",
    key="policy_table",
    column_config={TITLES["work_lost_max_gpu_h"]: st.column_config.NumberColumn(
        help="If every GPU's missing data lay before the cancel point.")},
)  # fmt: skip

st.subheader("Jobs the rule cancels")
pick = st.selectbox("At the threshold (hours)", list(rule.idle_hours), key="hits_at",
                    format_func=lambda h: f"{h:g}")  # fmt: skip
hits = cancelled.filter(pl.col("idle_hours") == pick)
if f.vcs:
    hits = hits.filter(pl.col("vc").is_in(f.vcs))
hits = hits.sort(["wrongful", "reclaimed_gpu_h"], descending=True)
widgets.table(
    widgets.readable(
        hits.select("job_id", "user", "vc", "gpus", "start_ts", "end_ts", "cancel_ts", "reason",
                    "reclaimed_gpu_h", "wrongful", "work_lost_gpu_h"),
        titles=TITLES,
    ),
    "The rule cancels no job in this view at this threshold.",
    name="policy jobs hit",
    key="policy_hits",
    open_jobs=True,
)  # fmt: skip
