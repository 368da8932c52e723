"""Running now: the running jobs idle on every one of their GPUs, with since when, on how many
GPUs, whose, and a way to the job: the list to act on (ask the user, or end the job)."""

from __future__ import annotations

from datetime import datetime

import streamlit as st

from gpuwaste.analyses import reads
from gpuwaste.dashboard import data, widgets

f = widgets.current_filters()
st.title("Running now")
widgets.show_view(f)
st.caption(
    "Running jobs whose every GPU has been idle (utilization 0 and no GPU memory used, the "
    "analyses' idle; or never used) up to the newest data `gpuwaste analyze` saw. Cluster, VC, "
    "GPU model, user and size filters apply; period and state do not (these jobs run now)."
)

idle = data.fetch(reads.idle_now, *f.running_now().jobs_where("u"))
as_of = idle["as_of"].max() if idle.height else None
widgets.data_age(f.cluster, as_of if isinstance(as_of, datetime) else None)
if idle.height == 0:
    st.info("No running job is idle on all its GPUs in this view.")
    st.stop()

c = st.columns(3)
c[0].metric("Jobs idle on all GPUs", widgets.count(idle.height, "job"))
c[1].metric("GPUs held idle", widgets.count(int(idle["gpus"].sum()), "GPU"))
c[2].metric("GPU hours idle so far", widgets.gpu_hours(float(idle["idle_gpu_h"].sum()), 1),
            help="Summed over these jobs' GPUs since each GPU became idle.")  # fmt: skip

widgets.table(
    widgets.readable(
        idle.select(
            "job_id", "user", "vc", "name", "gpus", "idle_since", "idle_h", "idle_gpu_h",
            "start_ts", "cluster",
        ),
        titles={
            "idle_since": "All GPUs idle since (UTC)",
            "idle_h": "Idle for (hours)",
            "idle_gpu_h": "Idle GPU hours",
        },
    ),
    name="running jobs idle on all GPUs",
    key="idle_now_table",
    open_jobs=True,
)  # fmt: skip
