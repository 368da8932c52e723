"""Overview: where the GPU hours went in the selected period, whose they are, how fresh the data is."""

from __future__ import annotations

import streamlit as st

from gpuwaste.dashboard import charts, data, widgets
from gpuwaste.dashboard import queries as q

f = widgets.current_filters()
st.title("Overview")
widgets.show_view(f)

tot = data.fetch(q.gpu_hours, f)
row = tot.row(0, named=True)
alloc = float(row["alloc_gpu_h"] or 0.0)


def pct(x: float) -> str:
    return f"{100 * x / alloc:.1f}% of allocated" if alloc else "-"


cols = st.columns(5)
cols[0].metric("GPU hours allocated", f"{alloc:,.0f}", help="Sum of waste_daily.alloc_gpu_h.")
cols[1].metric(
    "Used (busy)",
    f"{row['busy_gpu_h']:,.0f}",
    pct(row["busy_gpu_h"]),
    delta_color="off",
    delta_arrow="off",
)
cols[2].metric("Idle slots", f"{row['idle_slot_gpu_h']:,.0f}", pct(row["idle_slot_gpu_h"]),
               delta_color="off", delta_arrow="off")  # fmt: skip
cols[3].metric("Never-used GPUs", f"{row['never_used_gpu_h']:,.0f}", pct(row["never_used_gpu_h"]),
               delta_color="off", delta_arrow="off")  # fmt: skip
cols[4].metric(
    "No data",
    f"{row['missing_gpu_h']:,.0f}",
    pct(row["missing_gpu_h"]),
    delta_color="off",
    delta_arrow="off",
)

left, right = st.columns(2)
with left:
    widgets.plot(charts.breakdown(tot), key="breakdown")
with right:
    widgets.plot(charts.trend(data.fetch(q.gpu_hours_daily, f)), key="trend")
if f.user or f.sizes or f.states:
    st.caption(
        "GPU hour totals come from waste_daily, per cluster, VC and day: the user, size and state "
        "filters apply to the lists below, not to them."
    )

st.subheader("Who lost the most GPU hours")
users = data.fetch(q.top_users, f)
left, right = st.columns([3, 2])
with left:
    widgets.plot(charts.top_bar(users, "user", "Top users by GPU hours lost"), key="top_users")
with right:
    widgets.table(widgets.readable(users), "No jobs match this view.", name="top users")
st.subheader("Jobs with the most GPU hours lost")
widgets.job_table(data.fetch(q.top_jobs, f), key="top_jobs_table")

st.subheader("Data freshness")
left, right = st.columns(2)
with left:
    st.caption("Each source's watermark (how far ingestion has reached) and quarantined records.")
    widgets.table(
        widgets.readable(data.fetch(q.freshness, f)),
        "No ingest state recorded: run `gpuwaste ingest`.",
        name="ingest watermarks",
    )
with right:
    st.caption("Quarantined records by reason (`gpuwaste sql` shows them whole).")
    widgets.table(
        widgets.readable(data.fetch(q.quarantine_reasons, f)),
        "No record was quarantined.",
        name="quarantine reasons",
    )
