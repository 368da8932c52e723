"""The Streamlit entry point: `streamlit run app.py` (what `gpuwaste dashboard` runs).

Navigation, the guard for an empty or missing warehouse (it says what to run), the filters in the
sidebar, and the switch to the Job page when a job is selected in any table.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from gpuwaste.dashboard import data, widgets

HERE = Path(__file__).resolve().parent
PAGES = HERE / "views"

st.set_page_config(page_title="gpuwaste", page_icon=":material/memory:", layout="wide")

job_page = st.Page(PAGES / "job.py", title="Job", icon=":material/search:", url_path="job")
pages = [
    st.Page(PAGES / "overview.py", title="Overview", icon=":material/dashboard:",
            url_path="overview", default=True),
    st.Page(PAGES / "cdfs.py", title="Utilization CDFs", icon=":material/show_chart:",
            url_path="cdfs"),
    st.Page(PAGES / "waste.py", title="Waste tables", icon=":material/table_chart:",
            url_path="waste"),
    job_page,
    st.Page(PAGES / "sql.py", title="SQL", icon=":material/terminal:", url_path="sql"),
]  # fmt: skip
page = st.navigation(pages)

widgets.open_requested_job(job_page)

status = data.current_status()
if not status.ok:
    st.title(page.title)
    st.warning(status.message, icon=":material/info:")
    st.stop()

widgets.sidebar_filters()
page.run()
