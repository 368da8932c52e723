"""Streamlit pieces shared by the pages: the filter sidebar (bound to the URL), clickable job
tables, and text that comes from the data shown as text only."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import date
from functools import partial
from typing import Any, Literal

import polars as pl
import streamlit as st

from gpuwaste.analyses.tables import SIZE_CLASSES
from gpuwaste.dashboard import charts, data, queries
from gpuwaste.dashboard.filters import (
    CLUSTER,
    FILTER_KEYS,
    PERIOD,
    SIZE,
    STATE,
    STATES,
    USER,
    VC,
    Filters,
)
from gpuwaste.render import safe_text

JOB = "job"  # the Job page's job id, also its URL parameter
OPEN_JOB = "_open_job"  # job id set by a table click: the app switches to the Job page
PAGE_JOB = "views/job.py"


def _prune(key: str, allowed: Sequence[Any]) -> None:
    """Drop selections no longer among a widget's options (before the widget is drawn)."""
    value = st.session_state.get(key)
    if isinstance(value, list):
        kept = [v for v in value if v in allowed]
        if kept != value:
            st.session_state[key] = kept
    elif value is not None and value not in allowed:
        del st.session_state[key]


def sidebar_filters() -> Filters:
    """Draw the filters in the sidebar; their keys are the URL query parameters."""
    opts = data.fetch(queries.filter_options)
    clusters = opts["cluster"].unique(maintain_order=True).to_list()
    with st.sidebar:
        st.header("Filters")
        _prune(CLUSTER, clusters)
        cluster = st.selectbox("Cluster", clusters, key=CLUSTER, bind="query-params")
        mine = opts.filter(pl.col("cluster") == cluster)
        vcs = mine["vc"].drop_nulls().to_list()
        _prune(VC, vcs)
        st.multiselect("Virtual cluster", vcs, key=VC, bind="query-params", placeholder="all VCs")
        first = mine["first_day"].min()
        last = mine["last_day"].max()
        st.date_input(
            "Period (UTC days)",
            value=[],
            min_value=first if isinstance(first, date) else None,
            max_value=last if isinstance(last, date) else None,
            key=PERIOD,
            bind="query-params",
            help="Empty: the whole analyzed window.",
        )
        st.text_input("User", key=USER, bind="query-params", placeholder="all users")
        st.multiselect("Job size (GPUs)", SIZE_CLASSES, key=SIZE, bind="query-params",
                       placeholder="all sizes")  # fmt: skip
        st.multiselect("Final state", STATES, key=STATE, bind="query-params",
                       placeholder="all states")  # fmt: skip
        st.caption("The view lives in the URL: copy the address to share it.")
    return current_filters()


def open_requested_job(job_page: Any) -> None:
    """After a click in a job table: go to the Job page with the job in the URL. The filters'
    own parameters follow from their widgets (bound parameters cannot be passed here)."""
    job_id = st.session_state.pop(OPEN_JOB, None)
    if not job_id:
        return
    st.session_state.pop(JOB, None)
    st.switch_page(job_page, query_params={JOB: str(job_id)})


def current_filters() -> Filters:
    return Filters.from_state({k: st.session_state.get(k) for k in FILTER_KEYS})


_MARKDOWN = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$:])")


def plain(value: object) -> str:
    """Untrusted text for a label that Streamlit renders as Markdown (tabs, expanders)."""
    return _MARKDOWN.sub(r"\\\1", safe_text(value))


def show_view(f: Filters) -> None:
    """The current filters as one line of plain text (user names are untrusted)."""
    st.text(safe_text(f.describe()))


def _open_job(key: str, ids: list[str]) -> None:
    state = st.session_state.get(key)
    rows = state.selection.rows if state is not None else []
    if rows:
        st.session_state[OPEN_JOB] = ids[rows[0]]


def job_table(df: pl.DataFrame, key: str, height: int | str = "auto") -> None:
    """A table of jobs (with a job_id column); selecting a row opens it on the Job page."""
    if df.height == 0:
        st.info("No jobs match this view.")
        return
    ids = df["job_id"].to_list()
    st.dataframe(
        df,
        key=key,
        on_select=partial(_open_job, key, ids),
        selection_mode="single-row",
        hide_index=True,
        height=height,  # type: ignore[arg-type]
    )
    st.caption("Select a row to open the job.")


def table(df: pl.DataFrame, empty: str) -> None:
    if df.height == 0:
        st.info(empty)
    else:
        st.dataframe(df, hide_index=True)


def plot(spec: charts.Spec, key: str) -> None:
    """A chart of charts.py; its title is also its accessible name (the page's aria-label)."""
    # a facet sizes itself (Streamlit's default); everything else takes the column's width
    width: Literal["stretch"] | None = None if "facet" in spec else "stretch"
    st.vega_lite_chart(spec, key=key, alt=charts.title_of(spec), width=width)
