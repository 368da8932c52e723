"""SQL: one read-only query over the warehouse, with the table list and an example per table.

A query runs only when the operator presses Run: a `?sql=` link (or an example) fills the box
and waits. The sidebar's filters are not offered here (app.py): the query says what it reads."""

from __future__ import annotations

import streamlit as st

from gpuwaste.dashboard import data, sqlbox, widgets
from gpuwaste.dashboard.filters import Filters
from gpuwaste.warehouse.schema import all_tables

DEFAULT = sqlbox.example(all_tables()["job_usage"])
OUTCOME = "_sql_outcome"  # (query text, sqlbox.Outcome) of the last press of Run
BOUNDS = data.sql_settings()

st.title("SQL")
st.caption(
    "One read-only query (SELECT, WITH, DESCRIBE, SUMMARIZE...) over the warehouse views, over "
    "every cluster (the sidebar's filters do not apply: write `WHERE cluster = '...'`). "
    "Writes, COPY, ATTACH, INSTALL, LOAD and files outside the warehouse are refused. "
    f"At most {sqlbox.MAX_ROWS:,} rows, {BOUNDS.memory_mib:,} MiB of memory and "
    f"{BOUNDS.page_timeout_s:g} s. Nothing runs until you press Run."
)


def _use_example() -> None:
    name = st.session_state.get("example_table")
    if name:
        st.session_state["sql"] = sqlbox.example(all_tables()[name])


left, right = st.columns([3, 2])
with right:
    st.selectbox("Example for table", sorted(all_tables()), key="example_table", index=None,
                 placeholder="choose a table", on_change=_use_example)  # fmt: skip
    widgets.table(sqlbox.table_list(), name="warehouse tables", height=360, filters=Filters())
with left:
    if "sql" not in st.session_state and "sql" not in st.query_params:
        st.session_state["sql"] = DEFAULT
    query = st.text_area("Query", key="sql", bind="query-params", height=200)
    if st.button("Run", type="primary", key="run"):
        outcome = sqlbox.run(data.data_dir(), query or "", timeout_s=BOUNDS.page_timeout_s,
                             memory_mib=BOUNDS.memory_mib)  # fmt: skip
        st.session_state[OUTCOME] = (query or "", outcome)

last: tuple[str, sqlbox.Outcome] | None = st.session_state.get(OUTCOME)
if last is None:
    st.info("Press Run to run the query in the box.")
    st.stop()
ran, out = last
if ran != query:
    st.caption("The box has changed since the query below ran: press Run to run it.")
if out.error is not None:
    st.error("The query did not run:")
    st.code(out.error, language=None)
elif out.frame is not None:
    note = f"{out.frame.height:,} row(s) in {out.elapsed_s:.2f} s"
    if out.truncated:
        note += f" (first {sqlbox.MAX_ROWS:,} shown)"
    st.caption(note)
    # as the query returned it; the file is not named after the sidebar's view (not applied here)
    widgets.table(out.frame, "The query returned no rows.", name="sql result", filters=Filters())
