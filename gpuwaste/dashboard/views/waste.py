"""Waste tables: the studies' tables for the selected cluster and VCs [CloudBrain Tables III-V,
§IV-C1; Philly Tables 3, 5, 6], and the jobs behind them."""

from __future__ import annotations

import polars as pl
import streamlit as st

from gpuwaste.dashboard import charts, data, widgets
from gpuwaste.dashboard import queries as q

f = widgets.current_filters()
st.title("Waste tables")
widgets.show_view(f)
st.caption(
    "The studies' tables are computed per cluster and VC over the analyzed window "
    "(`gpuwaste analyze --since` narrows it); the period, user, size and state filters apply to the "
    "job lists."
)

st.subheader("Idle slots and never-used GPUs, debugging or not (CloudBrain Table IV)")
waste = data.fetch(q.summary, f, "waste_by_vc")
if waste.height:
    long = waste.unpivot(
        index=["vc", "kind"],
        on=["idle_slot_pct_own", "never_used_pct_own", "idle_slot_pct_all", "never_used_pct_all"],
        variable_name="measure",
        value_name="pct",
    ).with_columns(
        x=pl.col("vc") + " / " + pl.col("kind"),
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
widgets.table(widgets.readable(waste), "No rows in waste_by_vc for this view.", name="waste by vc")

left, right = st.columns(2)
with left:
    st.subheader("Jobs with unused GPUs by size (Table V)")
    nus = data.fetch(q.summary, f, "never_used_by_size")
    if nus.height:
        widgets.plot(charts.bars(nus, "gpus_requested", "share_pct", "vc",
                                 "Jobs with at least one never-used GPU", "% of jobs"),
                     key="table5")  # fmt: skip
    widgets.table(
        widgets.readable(nus),
        "No rows in never_used_by_size for this view.",
        name="never used by size",
    )
with right:
    st.subheader("Stable phases, t x m (Table III)")
    grid = data.fetch(q.summary, f, "stable_phase_grid")
    vcs = grid["vc"].unique(maintain_order=True).to_list() if grid.height else []
    if not vcs:
        st.info("No rows in stable_phase_grid for this view.")
    for i, tab in enumerate(
        st.tabs([widgets.plain(v) for v in vcs]) if len(vcs) > 1 else [st.container()] * len(vcs)
    ):
        with tab:
            g = grid.filter(pl.col("vc") == vcs[i])
            widgets.plot(charts.heatmap(g, f"% of GPU time in stable phases: {charts.label(vcs[i])}"),
                         key=f"table3_{i}")  # fmt: skip

st.subheader("Debugging jobs (CloudBrain §IV-C1)")
widgets.table(
    widgets.readable(data.fetch(q.summary, f, "debug_jobs")),
    "No debugging jobs in this view.",
    name="debug jobs",
)
st.caption("Debugging jobs that hit the time limit:")
cond, order = q.JOB_LISTS["debug_time_limit"]
widgets.job_table(data.fetch(q.job_list, f, cond, order), key="debug_limit_table", height=250)

st.subheader("Jobs with never-used GPUs")
cond, order = q.JOB_LISTS["never_used"]
widgets.job_table(data.fetch(q.job_list, f, cond, order), key="never_used_table", height=250)

with st.expander("Cluster-level tables (Philly Tables 3, 5, 6; queueing; spatial summary)"):
    ubs = data.fetch(q.summary, f, "util_by_size_status")
    if ubs.height:
        widgets.plot(charts.bars(ubs, "size", "util_mean", "state",
                                 "Mean GPU utilization by job size and final status", "%"),
                     key="table3_philly")  # fmt: skip
    for name, title in (
        ("util_by_size_status", "GPU utilization by size x status (Philly Table 3)"),
        ("util_by_spread", "16-GPU jobs by number of servers (Philly Table 5)"),
        ("jobs_by_status", "Jobs and GPU time by final status (Philly Table 6)"),
        ("queueing_delay", "Queueing delay by size class"),
        ("spatial_summary", "Spatial underutilization (CloudBrain §IV-A/B)"),
    ):
        st.caption(title)
        widgets.table(
            widgets.readable(data.fetch(q.summary, f, name)),
            f"No rows in {name} for this view.",
            name=name,
        )
