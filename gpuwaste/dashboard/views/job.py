"""Job: find a job, see each GPU's utilization and memory over time with idle slots and stable
phases shaded and never-used GPUs marked (a job with many GPUs first as one heatmap of GPUs x
time), and the job's figures and flags."""

from __future__ import annotations

import polars as pl
import streamlit as st

from gpuwaste.analyses import reads
from gpuwaste.dashboard import charts, data, widgets
from gpuwaste.dashboard import queries as q
from gpuwaste.render import safe_text

# Jobs with more GPUs than this get the compact view (one heatmap row per GPU) first, and
# per-GPU panels only for the GPUs picked under it (a panel is about 125 px tall).
COMPACT_ABOVE_GPUS = 4


def _pick_gpus(gpus: pl.DataFrame, cluster: str, job_id: str) -> pl.DataFrame:
    """The job_gpu_usage rows of the devices (GPUs, MIG instances) the operator picks for
    per-device panels (none at first)."""
    keys = charts.gpu_keys(gpus)
    names = [charts.gpu_name(r) for r in keys.iter_rows(named=True)]
    picked = st.multiselect(
        "GPUs to show in detail (utilization and memory over time)",
        range(len(names)),
        format_func=lambda i: names[i],
        key=f"detail_gpus_{cluster}_{job_id}",
        placeholder="pick GPUs from the rows above",
    )
    chosen = keys[list(picked)]
    return charts.by_device(gpus, chosen).select(gpus.columns)


f = widgets.current_filters()
st.title("Job")

search = st.text_input("Search jobs by id or user", key="q", bind="query-params",
                       placeholder="job id prefix or part of a user name")  # fmt: skip
picked = st.session_state.get(widgets.JOB) or st.query_params.get(widgets.JOB)
with st.expander("Matching jobs in this view (most GPU hours lost first)", expanded=not picked):
    if picked and not search:
        # a job is open and nothing searched: skip the list (a top-200 over every job in view)
        st.caption("Type in the search box to list jobs.")
    else:
        widgets.job_table(data.fetch(q.search_jobs, f, search or ""), key="search_table",
                          height=250)  # fmt: skip

job_id = (st.text_input("Job id", key=widgets.JOB, bind="query-params") or "").strip()
if not job_id:
    st.info("Pick a job: search above, type its id, or select a row in any job table.")
    st.stop()

rows = data.fetch(reads.job, f.cluster, job_id)
if rows.height == 0:
    st.warning("No such job in the selected cluster:")
    st.text(safe_text(job_id))
    st.stop()
job = rows.row(0, named=True)
cluster = str(job["cluster"])

st.text(f"Job {safe_text(job_id)}  ·  user {safe_text(job['user'])}  ·  VC {safe_text(job['vc'])}  ·  "
        f"{safe_text(job['name'])}")  # fmt: skip
if job.get("running"):  # its figures reach as far as the data: say how old they are
    widgets.data_age(cluster)
c = st.columns(6)
c[0].metric(
    "GPUs",
    widgets.count(job["gpus"], "GPU"),
    widgets.count(job["n_hosts"], "host"),
    delta_color="off",
    delta_arrow="off",
)
c[1].metric(
    "Duration",
    f"{(job['duration_s'] or 0) / 3600:.2f} h",
    str(job["state"]),
    delta_color="off",
    delta_arrow="off",
)
c[2].metric("GPU hours", widgets.gpu_hours((job["gpu_s"] or 0) / 3600, 2))
c[3].metric("GPU utilization", f"{job['util_mean'] or 0:.1f}%", f"max {job['util_max'] or 0:.0f}%",
            delta_color="off", delta_arrow="off")  # fmt: skip
c[4].metric("Idle-slot GPU hours", widgets.gpu_hours((job["idle_slot_gpu_s"] or 0) / 3600, 2),
            widgets.count(job["idle_slots"] or 0, "slot"), delta_color="off", delta_arrow="off")  # fmt: skip
c[5].metric("Never-used GPUs", widgets.count(job["never_used_gpus"] or 0, "GPU"),
            widgets.gpu_hours((job["never_used_gpu_s"] or 0) / 3600, 2), delta_color="off", delta_arrow="off")  # fmt: skip

gpus = data.fetch(reads.job_rows, "job_gpu_usage", cluster, job_id)
slots = data.fetch(reads.job_rows, "idle_slots", cluster, job_id)
phases = data.fetch(reads.job_rows, "stable_phases", cluster, job_id)
samples = data.fetch(reads.job_timeline, cluster, job_id)
if gpus.height == 0:
    st.info("No GPU of this job was measured (no allocation of GPUs recorded).")
else:
    if samples.height == 0:
        st.info("No GPU samples in the warehouse for this job's GPUs and interval.")
    n_gpus = gpus.select(*reads.DEVICE_KEY).n_unique()  # GPUs and MIG instances
    detail = gpus
    if n_gpus > COMPACT_ABOVE_GPUS:
        widgets.plot(
            charts.gpu_heatmap(samples, gpus, slots,
                               f"GPU utilization, {n_gpus} GPUs (job {charts.label(job_id)})"),
            key="gpu_heatmap",
        )  # fmt: skip
        st.caption(
            "One row per GPU, time across; blue: GPU utilization (darker is busier). Red: idle "
            "slots. Grey: a GPU never used during the job. Blank: no sample."
        )
        detail = _pick_gpus(gpus, cluster, job_id)
    if detail.height:
        title = f"GPU utilization and memory per GPU (job {charts.label(job_id)})"
        widgets.plot(charts.timeline(samples, detail, slots, phases, title), key="timeline")
        st.caption(
            "Red: idle slots. Green strip above a GPU: its stable memory phases (not drawn when "
            "they span its whole time). Grey: a GPU never used during the job. Left axis: utilization (%); right axis: memory used (MiB)."
        )
        if samples["power_w"].drop_nulls().len():
            title = f"Power draw per GPU (job {charts.label(job_id)})"
            widgets.plot(charts.power(samples, detail, title), key="power")
            used, lost = job["energy_kwh"], job["lost_energy_kwh"]
            # null: no power reading the analysis could use (never 0 kWh, docs/definitions.md)
            energy = (
                "Energy: no power data (no power reading in the job's analyzed samples)."
                if used is None
                else f"Energy: {used:,.3f} kWh, of which {lost or 0:,.3f} kWh in idle slots and "
                "on never-used GPUs."
            )
            st.caption(
                f"{energy} A MIG instance shows its GPU's power; its energy is its slice's share."
            )

flags = {
    "Debugging": job["is_debug"],
    "Declared debugging": job["is_debug_declared"],
    "Inferred debugging": job["is_debug_inferred"],
    "Hit the time limit": job["hit_time_limit"],
    "Fluctuating": job["fluctuating"],
    "Too little data": job["low_data"],
}
left, right = st.columns(2)
with left:
    st.caption("Flags and diagnoses")
    shown = widgets.readable(pl.DataFrame([{**flags, "diagnoses": job["diagnoses"]}]))
    widgets.table(
        pl.DataFrame({"Flag": shown.columns, "Value": [str(v) for v in shown.row(0)]}),
        name=f"job {job_id} flags",
    )
with right:
    st.caption("All figures of the job")
    figures = widgets.readable(rows.head(1))
    widgets.table(
        pl.DataFrame({"Figure": figures.columns,
                      "Value": [safe_text(v) for v in figures.row(0)]}),
        name=f"job {job_id} figures",
        height=300,
    )  # fmt: skip
with st.expander(f"Per GPU ({gpus.height})"):
    devices = pl.DataFrame(
        {"device": [reads.device_of(r) for r in gpus.iter_rows(named=True)]},
        schema={"device": pl.String},
    )
    widgets.table(widgets.readable(pl.concat([devices, gpus], how="horizontal")), "No rows.",
                  name=f"job {job_id} GPUs")  # fmt: skip
with st.expander(f"Idle slots ({slots.height})"):
    widgets.table(widgets.readable(slots), "No idle slots.", name=f"job {job_id} idle slots")
with st.expander(f"Memory phases ({phases.height})"):
    widgets.table(widgets.readable(phases), "No phases.", name=f"job {job_id} memory phases")
