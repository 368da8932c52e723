"""Queue and failures: why jobs waited [Philly §3.1, Table 2], how many GPU hours they waited
behind GPUs other jobs held idle, and why jobs failed [Philly §4.2, Table 7]: one section at a
time, chosen at the top (the section is in the URL). Only the chosen section's elements are built:
a new tab builds every element of a page in the browser, each kind's code on its first use
(bench/RESULTS.md, "Dashboard on 1 M jobs"), and the page opens on Table 2, what a reader needs
first."""

from __future__ import annotations

import polars as pl
import streamlit as st

from gpuwaste import columns
from gpuwaste.analyses.caveats import fair_share_not_judged, fair_share_unjudged
from gpuwaste.dashboard import charts, data, widgets
from gpuwaste.dashboard.failures import failures_section

CAUSES = ("fair-share", "fragmentation", "capacity", "other")
TABLE_2 = {
    "size_class": "Job size (GPUs)",
    "cause": "Cause",
    "stretches": "Waits",
    "stretches_pct": "Occurrences (%)",
    "cause_wait_s": columns.title("cause_wait_s"),  # its unit converts in widgets.readable
    "wait_pct": "Waiting time (%)",
}
HOLDERS = {
    "waits_behind": "Others' waits behind them",
    "blocked_gpu_h": "GPU hours others waited",
    "idle_gpu_h": "Idle GPU hours during those waits",
    "own_blocked_gpu_h": "GPU hours they waited behind their own idle GPUs",
}
# a share as a bar in its cell, drawn by the table itself (no chart code to load in a new tab)
SHARE = st.column_config.ProgressColumn(format="%.1f%%", min_value=0, max_value=100)
CHART = "chart"  # the key and URL parameter of the expander of Table 2's chart
SECTION = "section"  # the section control's key and URL parameter
# the sections, each its label and its URL value (a bound control's URL holds the label)
WAITS, IDLE, FAILURES = SECTIONS = ("Why jobs waited", "Waits behind idle GPUs", "Why jobs failed")
# the frames of data.queue each section draws
FRAMES = {WAITS: ("causes",), IDLE: ("idle_daily", "holders"), FAILURES: ("reasons", "attempts")}


def waits_section(frames: dict[str, pl.DataFrame]) -> None:
    """Table 2 with its figures, its shares drawn in its cells and its chart on demand."""
    st.subheader("Why jobs waited (Philly Table 2)")
    st.caption(
        "Each wait (submission to start, and between a job's attempts) is cut where the "
        "cluster's occupancy changes, and each piece classified: fair-share (its VC held its "
        "quota), capacity (fewer GPUs free than it ran on), fragmentation (enough free, not on few "
        "enough hosts for its GPUs per host), other (room was there: the scheduler's order or "
        "latency). A wait counts once, under the cause of most of its time; the waiting time "
        "splits by cause."
    )
    summary = widgets.without_unsplit_model(frames["causes"])
    shown = summary.filter(pl.col("vc") == summary["vc"].first()) if summary.height else summary
    if shown.height:
        every = shown.filter(pl.col("size_class") == "all").row(0, named=True)
        cols = st.columns(3)
        cols[0].metric("Waits", widgets.count(every["waits"] or 0, "wait"))
        cols[1].metric("Hours waited", f"{(every['wait_s'] or 0) / 3600:,.0f} h")
        cols[2].metric(
            "Out-of-order starts",
            f"{every['out_of_order_pct'] or 0:.1f}%",
            help="Starts of a job while an earlier-submitted one, which the GPUs it took would "
            "have fitted, waited (not for fair-share), as a share of all starts (Philly §3.1: "
            "38.1 %).",
        )
        if fair_share_unjudged(shown).height:
            st.info(fair_share_not_judged(), icon=":material/info:")
        # the shares are drawn in the table's cells; the chart waits until its expander is
        # opened (a bound expander's content runs only when open; `?chart=true` opens it)
        chart = st.expander("Waiting time by cause and job size, as a chart", key=CHART,
                            bind="query-params")  # fmt: skip
        if chart.open:
            sized = shown.filter(pl.col("size_class") != "all")
            with chart:
                widgets.plot(
                    charts.bars(sized, "size_class", "wait_pct", "cause",
                                "Waiting time by cause and job size",
                                "% of the size's waiting time"),
                    key="table2",
                )  # fmt: skip
    table2 = summary.select(c for c in ("vc", "gpu_model", *TABLE_2) if c in summary.columns)
    widgets.table(
        widgets.readable(table2, TABLE_2),
        "No waits in this view (run `gpuwaste analyze` after ingesting jobs with start times).",
        name="queue causes",
        column_config={TABLE_2[c]: SHARE for c in ("stretches_pct", "wait_pct")},
    )


def idle_section(frames: dict[str, pl.DataFrame]) -> None:
    """The GPU hours waited behind idle GPUs per day and VC of the idle GPUs, and their holders."""
    st.subheader("GPU hours waited behind idle GPUs")
    st.caption(
        "While a job waited for lack of room (its wait's cause capacity or fragmentation), other "
        "users' jobs held GPUs allocated but idle (idle slots, never-used GPUs): the GPU hours of "
        "waiting those idle GPUs could have served (at most the waiting job's own GPUs x that "
        "wait), by the VC that held them. During a fair-share wait only its own VC's idle GPUs "
        "count; while room was there (cause other), none. The chart and the holders' first "
        "figures count other users' waits; a holder's own waits behind their own idle GPUs "
        "are in the last column."
    )
    daily = frames["idle_daily"]
    if daily.height:
        widgets.plot(
            charts.bars(daily, "day", "blocked_gpu_h", "holder_vc",
                        "GPU hours waited behind idle GPUs, by the idle GPUs' VC", "GPU hours"),
            key="queue_idle_daily",
        )  # fmt: skip
    widgets.table(
        widgets.readable(frames["holders"], HOLDERS),
        "No job waited while other users' GPUs were idle in this view.",
        name="waiting behind idle GPUs",
    )
    st.markdown(
        ":material/lightbulb: **What to do:** the users at the top kept their colleagues waiting "
        "with GPUs they did not use: `gpuwaste notify` tells them, and an idle-job rule "
        "(Policies page) would have released the GPUs."
    )


f = widgets.current_filters()
st.title("Queue and failures")
widgets.show_view(f)
st.caption(
    "Tables 2 and 7, and the figures above Table 2, follow the cluster, VC, GPU model, period "
    "and user filters: a wait is in the period when it ended in it (the start it waited for) "
    "and a failed attempt when it started in it, as `gpuwaste report --since` counts them; "
    "with a user, the waits and failed attempts of that user's jobs. The size and state "
    "filters do not apply to them (Table 2 has a row per size). "
    f"The waits behind idle GPUs follow {widgets.WAITED_BEHIND_IDLE_FILTERS}. The failed "
    "attempts follow every filter, the period as Table 7's."
)
asked = widgets.link_values((SECTION,))
section = st.segmented_control(
    "Section", SECTIONS, default=WAITS, required=True, key=SECTION, bind="query-params",
    label_visibility="collapsed",
)  # fmt: skip
widgets.warn_link_fallbacks(asked, {SECTION: f"the section {section or WAITS}"})
frames = data.queue(f, only=FRAMES[section or WAITS])
if section == IDLE:
    idle_section(frames)
elif section == FAILURES:
    failures_section(f, frames)
else:
    waits_section(frames)
