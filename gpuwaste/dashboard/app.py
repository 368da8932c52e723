"""The Streamlit entry point: `streamlit run app.py` (what `gpuwaste dashboard` runs).

Navigation, the guard for an empty or missing warehouse (it says what to run), the filters in the
sidebar, and the switch to the Job page when a job is selected in any table.
"""

from __future__ import annotations

import streamlit as st

from gpuwaste.dashboard import data, widgets
from gpuwaste.dashboard.filters import FILTER_KEYS
from gpuwaste.dashboard.pages import JOB, PAGES, SQL

# The tab's icon, drawn here: a ":material/...:" icon would be fetched from fonts.gstatic.com,
# and the dashboard must work with no internet access (an SVG becomes a data: URL).
ICON = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32">'
    '<rect x="6" y="6" width="20" height="20" rx="3" fill="#4C78A8"/>'
    '<rect x="11" y="11" width="10" height="10" rx="1" fill="#ffffff"/>'
    '<path d="M10 2v4M16 2v4M22 2v4M10 26v4M16 26v4M22 26v4M2 10h4M2 16h4M2 22h4M26 10h4'
    'M26 16h4M26 22h4" stroke="#4C78A8" stroke-width="2"/></svg>'
)
st.set_page_config(page_title="gpuwaste", page_icon=ICON, layout="wide")

pages = {
    p.url_path: st.Page(p.path, title=p.title, icon=p.icon, url_path=p.url_path, default=p.default)
    for p in PAGES
}
page = st.navigation(list(pages.values()))

# the start-up warm-up waits while this runs (data.PageRuns)
with data.PAGE_RUNS.running():
    widgets.open_requested_job(pages[JOB])

    status = data.current_status()
    if not status.ok:
        st.title(page.title)
        st.warning(status.message, icon=":material/info:")
        st.stop()

    if page.url_path == SQL:
        # Free SQL reads every cluster: the filters are not offered here, but kept for the other pages
        for key in FILTER_KEYS:
            if key in st.session_state:
                st.session_state[key] = st.session_state[key]
        st.sidebar.caption(
            "The filters do not apply to SQL: filter in the query (`WHERE cluster = '...'`). "
            "They come back on the other pages."
        )
    else:
        widgets.sidebar_filters()
    page.run()
