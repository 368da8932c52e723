"""Utilization CDFs per virtual cluster [CloudBrain §IV-A] and per-minute GPU utilization by job
size and final status [Philly Fig. 5]. Curves are quantiles computed in DuckDB."""

from __future__ import annotations

import polars as pl
import streamlit as st

from gpuwaste.dashboard import charts, data, widgets
from gpuwaste.dashboard import queries as q
from gpuwaste.dashboard.filters import STATES
from gpuwaste.warehouse.results import SIZE_CLASSES

RESOURCES = {
    "GPU utilization": "util",
    "GPU memory": "mem_util",
    "CPU": "cpu_util",
    "Host memory": "host_mem_util",
}

f = widgets.current_filters()
st.title("Utilization CDFs")
widgets.show_view(f)

asked = widgets.link_values(("resource", "threshold", "side"))
c1, c2, c3 = st.columns([2, 2, 1])
with c1:
    resource = st.radio("Resource", list(RESOURCES), key="resource", bind="query-params",
                        horizontal=True)  # fmt: skip
with c2:
    threshold = st.slider("Threshold (%)", 0, 100, 50, key="threshold", bind="query-params",
                          help="The legend reads the share of jobs at or below it off each curve.")  # fmt: skip
with c3:
    side = st.toggle("Side by side", key="side", bind="query-params")

widgets.warn_link_fallbacks(
    asked,
    {
        "resource": str(resource),
        "threshold": f"a threshold of {threshold}%",
        "side": "side by side" if side else "curves overlaid",
    },
)
stem = RESOURCES[resource or "GPU utilization"]
shares: list[dict[str, object]] = []
cols = st.columns(2)
for col, kind in zip(cols, ("mean", "max"), strict=True):
    column = f"{stem}_{kind}"
    curves = data.fetch(q.job_cdf, f, column)
    with col:
        if curves.height == 0:
            st.info(f"No job in this view has a {q.CDF_COLUMNS[column]}.")
            continue
        groups = curves["vc"].unique(maintain_order=True).to_list()
        groups = [g for g in groups if g != "(all)"] + (["(all)"] if "(all)" in groups else [])
        title = f"CDF of job {q.CDF_COLUMNS[column]}"
        widgets.plot(
            charts.cdf(curves, title, f"{q.CDF_COLUMNS[column]} (%)", float(threshold), bool(side),
                       groups),
            key=f"cdf_{kind}",
        )  # fmt: skip
        for g in groups:
            c = curves.filter(pl.col("vc") == g).sort("p")
            shares.append(
                {"VC": g, "Statistic": q.CDF_COLUMNS[column], "Jobs": int(c["jobs"][0]),
                 f"Jobs at or below {threshold}% (%)":
                     round(100 * charts.share_below(c, float(threshold)), 1)}
            )  # fmt: skip
in_view = int(data.fetch(q.job_counts, f)["jobs"][0])
measured = max((int(str(s["Jobs"])) for s in shares if s["VC"] == "(all)"), default=0)
if shares and measured < in_view:
    # the Overview and the Waste tables count every job in view
    st.caption(
        f"The curves count the {measured:,} of the {in_view:,} jobs in view that have a "
        f"{resource or 'GPU utilization'} figure; the other {in_view - measured:,} have none "
        "(no GPU allocated, or no sample of it)."
    )
if shares:
    st.caption("Share of jobs at or below the threshold, read off the curves above.")
    widgets.table(pl.DataFrame(shares), name="cdf shares")

st.subheader("Per-minute GPU utilization")
st.caption("Every GPU minute of the jobs, per cluster, VC and GPU model over the analyzed window: "
           "the period and user filters do not apply; size and state do.")  # fmt: skip
left, right = st.columns(2)
with left:
    h = data.fetch(q.minute_cdf, f, "size")
    if h.height:
        widgets.plot(charts.minute_cdf(h, "Per-minute GPU utilization by job size (GPUs)",
                                       SIZE_CLASSES), key="minute_size")  # fmt: skip
    else:
        st.info("No per-minute utilization for this view.")
with right:
    h = data.fetch(q.minute_cdf, f, "state")
    if h.height:
        widgets.plot(charts.minute_cdf(h, "Per-minute GPU utilization by final status", STATES),
                     key="minute_state")  # fmt: skip
    else:
        st.info("No per-minute utilization for this view.")
