"""Waste tables: the studies' tables for the selected cluster, VCs and GPU models [CloudBrain
Tables III-V, §IV-C1; Philly Tables 3, 5, 6], each with what to do about it and the jobs behind
it."""

from __future__ import annotations

import polars as pl
import streamlit as st

from gpuwaste.dashboard import charts, data, widgets
from gpuwaste.dashboard import queries as q
from gpuwaste.render import single_member_rollups
from gpuwaste.warehouse.results import ALL_MODELS, ROLLUP_COLUMNS

TIME_WEIGHTED = "GPU utilization (time-weighted mean, %)"
# The study tables' own names for their figures, where the generic titles would be ambiguous.
TITLES: dict[str, dict[str, str]] = {
    "waste_by_vc": {"idle_slot_gpu_s": "Idle-slot GPU hours",
                    "never_used_gpu_s": "Never-used GPU hours",
                    "idle_slot_pct_own": "Idle slots (% own)", "never_used_pct_own": "Never-used (% own)",
                    "idle_slot_pct_all": "Idle slots (% all)", "never_used_pct_all": "Never-used (% all)"},
    "never_used_by_size": {"jobs_with_never_used": "With a never-used GPU", "share_pct": "Share (%)"},
    "util_by_size_status": {"util_mean": TIME_WEIGHTED},
    "util_by_spread": {"util_mean": TIME_WEIGHTED, "util_p50": "Per-minute util. p50 (%)",
                       "util_p90": "Per-minute util. p90 (%)",
                       "util_p95": "Per-minute util. p95 (%)"},
    "spatial_summary": {"value": "Value (% or mean %)"},
}  # fmt: skip

# the job lists of the page, in its order (queries.JOB_LISTS): read in one query
JOB_TABLES = ("lost", "never_used", "stable_phases", "debug_time_limit", "low_util", "failed",
              "queued")  # fmt: skip

f = widgets.current_filters()
st.title("Waste tables")
widgets.show_view(f)
st.caption(
    "The studies' tables are computed per cluster, VC and GPU model over all the analyzed data "
    "(`gpuwaste report NAME --since` gives one for a period); the period, user, size and state "
    "filters apply to the "
    "job lists. GPU time in GPU hours."
)


def study_table(table: str, empty: str) -> pl.DataFrame:
    """A summary table as read: without the roll-up rows that repeat their only member (the
    terminal's rule), the cluster column (the view names it), nor the GPU model's when every row
    is of all models, readable."""
    frame = data.fetch(q.summary, f, table)
    shown = single_member_rollups(frame, ROLLUP_COLUMNS).drop("cluster")
    if table != "waste_by_model":  # its rows are per model, '(all)' among them
        shown = widgets.without_unsplit_model(shown)
    widgets.table(widgets.readable(shown, TITLES.get(table)), empty, name=table)
    return frame


def with_group(frame: pl.DataFrame) -> pl.DataFrame:
    """`group`: the VC, and its GPU model when the view selects several models."""
    several = frame.height > 0 and frame["gpu_model"].n_unique() > 1
    return frame.with_columns(
        group=pl.col("vc") + " / " + pl.col("gpu_model") if several else pl.col("vc")
    )


def jobs_of(name: str) -> pl.DataFrame:
    """The rows of job list `name` (one of JOB_TABLES)."""
    if name not in JOB_TABLES:
        raise ValueError(f"{name} is not one of the page's job lists ({', '.join(JOB_TABLES)})")
    lists = data.fetch(q.job_lists, f, JOB_TABLES)
    return lists.filter(pl.col("list") == name).drop("list")


def act(what_to_do: str, jobs: str, title: str) -> None:
    """One line on what to do about the table above, and the worst jobs behind it (selecting one
    opens it on the Job page)."""
    st.markdown(f":material/lightbulb: **What to do:** {what_to_do}")
    with st.expander(title):
        widgets.job_table(jobs_of(jobs), key=f"{jobs}_table", height=250)


st.subheader("Idle slots and never-used GPUs, debugging or not (CloudBrain Table IV)")
waste = with_group(data.fetch(q.summary, f, "waste_by_vc"))
if waste.height:
    long = waste.unpivot(
        index=["group", "kind"],
        on=["idle_slot_pct_own", "never_used_pct_own", "idle_slot_pct_all", "never_used_pct_all"],
        variable_name="measure",
        value_name="pct",
    ).with_columns(
        x=pl.col("group") + " / " + pl.col("kind").str.replace_all("_", " "),
        measure=pl.col("measure").replace(
            {
                "idle_slot_pct_own": "idle slots, % of own GPU time",
                "never_used_pct_own": "never-used GPUs, % of own GPU time",
                "idle_slot_pct_all": "idle slots, % of all GPU time",
                "never_used_pct_all": "never-used GPUs, % of all GPU time",
            }
        ),
    )
    widgets.plot(charts.bars(long, "x", "pct", "measure", "Idle-slot and never-used GPU time",
                             "% of GPU time"), key="table4")  # fmt: skip
study_table("waste_by_vc", "No jobs in this view.")
st.caption("% own: of the GPU time of that kind of job; % all: of all GPU time in the VC.")
idle = data.fetch(q.job_gpu_hours, f).row(0, named=True)
held = idle["idle_held_gpu_h"]  # None: no GPU in view has a memory reading
if held is None and idle["idle_slot_gpu_h"] > 0:
    st.caption(
        f"Idle held versus empty: {idle['idle_slot_gpu_h']:.1f} GPU h in idle slots; held idle "
        "(GPU memory held with no kernel running) is not measured: no GPU in view reports its "
        "memory use."
    )
elif held is not None and (held > 0 or idle["idle_slot_gpu_h"] > 0):
    drew = idle["held_idle_energy_kwh"]
    st.caption(  # empty idle is the idle-slot time (docs/definitions.md#idle)
        f"Idle held versus empty: besides the {idle['idle_slot_gpu_h']:.1f} empty-idle GPU h "
        f"(the idle slots, no memory held), the jobs in view held GPU memory with no kernel "
        f"running at 0 % for over a minute for {held:.1f} held-idle GPU h"
        + ("" if drew is None else f", drawing {drew:.2f} kWh")
        + " (busy time for the studies' figures, not counted as lost)."
    )
act("ask the owners of the jobs that lose the most to release GPUs they leave idle, or to request "
    "fewer.", "lost", "Jobs with the most GPU hours lost")  # fmt: skip
widgets.waited_behind_idle(f)

st.subheader("Jobs with unused GPUs by size (CloudBrain Table V)")
nus = with_group(data.fetch(q.summary, f, "never_used_by_size"))
if nus.height:
    widgets.plot(charts.bars(nus, "gpus_requested", "share_pct", "group",
                             "Jobs with at least one never-used GPU", "% of jobs"), key="table5")  # fmt: skip
study_table("never_used_by_size", "No jobs in this view.")
act("ask the owners of these jobs to request only the GPUs their code uses (a never-used GPU is "
    "held for the whole job).", "never_used", "Jobs with never-used GPUs")  # fmt: skip

st.subheader("Stable phases, t x m (CloudBrain Table III)")
grid = with_group(data.fetch(q.summary, f, "stable_phase_grid"))
vcs = grid["group"].unique(maintain_order=True).to_list() if grid.height else []
if not vcs:
    st.info("No stable phases in this view.")
for i, tab in enumerate(
    st.tabs([widgets.plain(v) for v in vcs]) if len(vcs) > 1 else [st.container()] * len(vcs)
):
    with tab:
        g = grid.filter(pl.col("group") == vcs[i])
        widgets.plot(charts.heatmap(g, f"% of GPU time in stable phases: {charts.label(vcs[i])}"),
                     key=f"table3_{i}")  # fmt: skip
act("jobs whose GPU memory stays flat for long stretches leave room on their GPUs: they are "
    "candidates for sharing a GPU (MPS, MIG) or for smaller GPUs.", "stable_phases",
    "Jobs with the most stable phases")  # fmt: skip

st.subheader("GPU hours lost per GPU model")
models = data.fetch(q.summary, f, "waste_by_model").filter(pl.col("gpu_model") != ALL_MODELS)
if models.height:
    widgets.plot(charts.bars(models, "gpu_model", "lost_gpu_h", "vc",
                             "Idle-slot + never-used GPU hours by GPU model", "GPU hours"),
                 key="by_model")  # fmt: skip
study_table("waste_by_model", "No GPU time in this view.")
st.caption(
    "The model of each GPU: DCGM modelName, else the cluster's gpu_models host map, else the "
    "Slurm GRES type. GPU hours are slice-weighted on MIG (a 1g.10gb instance is 1/7 of a GPU). "
    "This table splits a job's GPUs by their own models; the other tables, and the GPU model "
    "filter, go by the job's model ('mixed' when its GPUs are of several)."
)
st.markdown(":material/lightbulb: **What to do:** a model that loses much of its time is the first "
            "to reclaim, or to split into MIG instances for small jobs (diagnosis "
            "`fits_smaller_slice` names them).")  # fmt: skip

st.subheader("Debugging jobs (CloudBrain §IV-C1)")
study_table("debug_jobs", "No debugging jobs in this view.")
act("debugging jobs that hit the time limit held their GPUs to the end: suggest a shorter time "
    "limit or an interactive partition for debugging.", "debug_time_limit",
    "Debugging jobs that hit the time limit")  # fmt: skip

with st.expander("Cluster-level tables (Philly Tables 3, 5, 6; queueing; spatial summary)"):
    ubs = data.fetch(q.summary, f, "util_by_size_status")
    if ubs.height:
        widgets.plot(charts.bars(ubs, "size", "util_mean", "state",
                                 "GPU utilization (time-weighted mean) by job size and final status",
                                 "%"), key="table3_philly")  # fmt: skip
    for name, title, what_to_do, jobs in (
        ("util_by_size_status", "GPU utilization by size x status (Philly Table 3)",
         "low utilization in large jobs costs the most GPUs: look at the jobs below.", "low_util"),
        ("util_by_spread", "16-GPU jobs by number of servers (Philly Table 5)",
         "jobs spread over more servers run slower: place multi-GPU jobs on as few servers as "
         "possible.", None),
        ("jobs_by_status", "Jobs and GPU time by final status (Philly Table 6)",
         "GPU time of failed and killed jobs is lost work: find the jobs that fail after long runs.",
         "failed"),
        ("queueing_delay", "Queueing delay by size class",
         "long waits for large jobs mean fragmented GPUs: GPUs released by the idle jobs above "
         "shorten them.", "queued"),
        ("spatial_summary", "Spatial underutilization (CloudBrain §IV-A/B)",
         "see the Utilization CDFs page for the distribution behind these shares.", None),
    ):  # fmt: skip
        st.caption(title)
        study_table(name, "Nothing measured in this view.")
        st.markdown(f":material/lightbulb: **What to do:** {what_to_do}")
        if jobs:
            st.caption(f"Worst jobs ({jobs.replace('_', ' ')}):")
            widgets.job_table(jobs_of(jobs), key=f"{jobs}_table", height=250)
