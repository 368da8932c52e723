"""Overview: where the GPU hours went in the selected period, whose they are, how fresh the data is."""

from __future__ import annotations

import polars as pl
import streamlit as st

from gpuwaste.dashboard import charts, data, queries, widgets

UTILIZATION = "GPU utilization (time-weighted mean)"  # the one headline name (docs/analyses.md)

f = widgets.current_filters()
st.title("Overview")
widgets.show_view(f)

# With a user, size or state filter, waste_daily (per cluster, VC and day) cannot give the totals:
# they come from the GPU rows of the jobs in view.
per_job = bool(f.user or f.sizes or f.states)
frames = data.overview(f)
row = frames["totals"].row(0, named=True)
if not row.get("observed_gpu_h"):  # a waste_daily written before it had utilization columns
    per_job_row = data.fetch(queries.job_gpu_hours, f)
    row = {**row, **per_job_row.select("observed_gpu_h", "util_gpu_h").row(0, named=True)}
jobs = int(frames["counts"]["jobs"][0])
alloc = float(row["alloc_gpu_h"] or 0.0)
observed = float(row["observed_gpu_h"] or 0.0)


def pct(x: float) -> str:
    return f"{100 * x / alloc:.1f}% of allocated" if alloc else "-"


if not jobs:
    st.info("No jobs match this view.", icon=":material/info:")
elif not alloc:
    st.warning(
        f"{jobs:,} jobs in this view but 0 GPU hours allocated: no job has a GPU "
        "allocation (`job_gpus` rows: which GPUs of which host it held), so there is nothing to "
        "measure. Scheduler records (`gpuwaste ingest slurm`) give them; for `gpuwaste ingest csv`, "
        "map the jobs' `allocation` (or `hosts`) column in the mapping's `[jobs]` section, ingest "
        "again and run `gpuwaste analyze`.",
        icon=":material/warning:",
    )

# a metric's label is cut to its column's width: the headline's long name gets a wide one
cols = [*st.columns([2, 1]), *st.columns(4)]
cols[0].metric(
    UTILIZATION,
    f"{100 * float(row['util_gpu_h']) / observed:.1f}%" if observed else "-",
    help="Each GPU's utilization weighted by the time it was observed, over every GPU of the jobs "
    "in view (Philly Table 3's mean utilization). Time without samples counts in neither part.",
)
cols[1].metric("GPU hours allocated", widgets.gpu_hours(alloc))
for col, (field, name, help_text) in zip(
    cols[2:],
    (
        ("busy_gpu_h", "Busy (not idle)", "Observed GPU time outside idle slots and never-used "
         "GPUs: a GPU at 5% utilization counts as busy."),
        ("idle_slot_gpu_h", "Idle slots", "Stretches where an allocated GPU sat idle."),
        ("never_used_gpu_h", "Never-used GPUs", "GPUs that were allocated and never used."),
        ("missing_gpu_h", "No data", "Allocated GPU time without samples."),
    ),
    strict=True,
):  # fmt: skip
    value = float(row[field] or 0.0)
    col.metric(name, widgets.gpu_hours(value), pct(value), delta_color="off", delta_arrow="off",
               help=help_text)  # fmt: skip
busy_vs_util = (
    f"here {100 * float(row['busy_gpu_h'] or 0) / alloc:.1f}% busy at "
    f"{100 * float(row['util_gpu_h']) / observed:.1f}% utilization"
    if alloc and observed
    else "so a GPU can be busy at a low utilization"
)
st.caption(
    "**Busy** counts time, not effort: every observed GPU hour outside idle slots and "
    "never-used GPUs, however little the GPU did in it (a GPU at 5% utilization is busy). **GPU "
    f"utilization** is how much the GPUs did in the time observed: {busy_vs_util}. "
    "Days and times in UTC. "
    + (
        "The totals are those of the jobs in view (every filter applies)."
        if per_job
        else "The totals follow the cluster, VC, GPU model and period filters."
    )
)

# The energy of the jobs in view, where some GPU reported power (docs/definitions.md#energy)
energy = frames["energy"].select("energy_kwh", "lost_energy_kwh").row(0, named=True)
if energy["energy_kwh"] is not None:
    used_kwh, lost_kwh = float(energy["energy_kwh"]), float(energy["lost_energy_kwh"] or 0.0)
    st.metric(
        "Energy lost (kWh)",
        f"{lost_kwh:,.1f} kWh",
        f"{100 * lost_kwh / used_kwh:.1f}% of {used_kwh:,.1f} kWh" if used_kwh else "-",
        delta_color="off",
        delta_arrow="off",
        help="The GPUs' energy in idle slots and on never-used GPUs, of the jobs in view (power "
        "x time, or the energy counter; the GPUs' own, not the facility's). GPUs without a "
        "power reading count in neither part.",
    )

# Jobs whose GPUs nothing named count no GPU time above (never as idle): say how much that is.
unresolved = float(frames["unresolved"]["unresolved_gpu_h"][0])
if unresolved:
    st.metric(
        "GPU hours not tied to a GPU",
        widgets.gpu_hours(unresolved),
        f"{100 * unresolved / (alloc + unresolved):.1f}% of scheduled GPU hours",
        delta_color="off",
        delta_arrow="off",
        help="GPU hours of jobs whose scheduler named their hosts but nothing named their GPUs "
        "(no job label on the telemetry, no scontrol capture while they ran, not holding whole "
        "hosts): left out of every figure above, neither busy nor idle. docs/ingest-files.md "
        "says how to tie them (scontrol captures, the deploy/slurm prolog).",
    )

if jobs and alloc:  # else the message above says why there is nothing to draw
    left, right = st.columns(2)
    with left:
        widgets.plot(charts.breakdown(pl.DataFrame([row])), key="breakdown")
    with right:
        widgets.plot(charts.trend(frames["daily"]), key="trend")
        if per_job:
            st.caption(
                "Per day, the cluster's VCs: the user, size and state filters do not apply here."
            )

st.subheader("Who lost the most GPU hours")
users = frames["users"]
if users.height:
    widgets.plot(charts.top_bar(users, "user", "Top users by GPU hours lost"), key="top_users")
    st.caption("Ask the users at the top to release GPUs they do not use.")
widgets.table(widgets.readable(users), "No jobs match this view.",
              name="top users")  # fmt: skip
widgets.waited_behind_idle(f)
vcs = frames["vcs"]
if widgets.priced(vcs):
    st.subheader("Money lost per VC")
    st.caption("Idle-slot and never-used GPU hours priced by `[cost]` (the GPUs of models it "
               "prices; the others count as nothing).")  # fmt: skip
    widgets.table(widgets.readable(vcs), "No jobs match this view.", name="money per vc")
st.subheader("Jobs with the most GPU hours lost")
widgets.job_table(frames["jobs"], key="top_jobs_table")

st.subheader("Data freshness")
fresh = data.cluster_freshness()
if f.cluster:
    fresh = fresh.filter(pl.col("cluster") == f.cluster)
for cluster, reason in (
    fresh.filter(pl.col("stale"))
    .select("cluster", "stale_reason")
    .unique(maintain_order=True)
    .rows()
):
    st.warning(
        f"Results of cluster {widgets.plain(cluster)} are older than its data: {reason}.",
        icon=":material/update:",
    )
st.caption("When each source was last ingested and how far its data reach; when each cluster was "
           "last analyzed and the newest sample that analysis saw.")  # fmt: skip
widgets.table(
    widgets.readable(
        fresh.drop("stale_reason"),
        titles={"watermark": "Data up to (UTC)", "ingested_at": "Last ingest (UTC)",
                "samples_newest": "Newest sample (UTC)", "analyzed_at": "Last analyze (UTC)",
                "analyzed_up_to": "Analyzed samples up to (UTC)", "stale": "Results stale"},
    ).with_columns(pl.col("Last analyze (UTC)").replace("", "never")),
    "No ingest or analysis recorded: run `gpuwaste ingest`, then `gpuwaste analyze`.",
    name="freshness",
)  # fmt: skip
quarantined = frames["sources"].filter(pl.col("quarantined") > 0)
if quarantined.height == 0:
    st.info("No record was quarantined.")
else:
    left, right = st.columns(2)
    with left:
        st.caption("Quarantined records per source.")
        widgets.table(widgets.readable(quarantined.select("cluster", "source", "quarantined")),
                      name="quarantined per source")  # fmt: skip
    with right:
        st.caption("Quarantined records by reason (`gpuwaste sql` shows them whole).")
        widgets.table(
            widgets.readable(frames["reasons"]),
            "No reason recorded for this cluster.",
            name="quarantine reasons",
        )
