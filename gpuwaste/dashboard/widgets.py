"""Streamlit pieces shared by the pages: the filter sidebar (bound to the URL), clickable job
tables, and text that comes from the data shown as text only."""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence
from datetime import UTC, date, datetime
from functools import partial
from typing import Any, Literal

import polars as pl
import streamlit as st

from gpuwaste import columns
from gpuwaste.analyses import freshness
from gpuwaste.dashboard import charts, data, queries
from gpuwaste.dashboard.filters import (
    CLUSTER,
    FILTER_KEYS,
    MODEL,
    PERIOD,
    SIZE,
    STATE,
    STATES,
    USER,
    VC,
    Filters,
    file_part,
)
from gpuwaste.render import safe_text
from gpuwaste.warehouse.results import ALL_MODELS, SIZE_CLASSES, UNKNOWN_MODEL

JOB = "job"  # the Job page's job id, also its URL parameter
OPEN_JOB = "_open_job"  # job id set by a table click: the app switches to the Job page
JOB_ID = columns.JOB_ID_TITLE  # the job_id column's readable title


def _prune(key: str, allowed: Sequence[Any]) -> None:
    """Drop selections no longer among a widget's options (before the widget is drawn)."""
    value = st.session_state.get(key)
    if isinstance(value, list):
        kept = [v for v in value if v in allowed]
        if kept != value:
            st.session_state[key] = kept
    elif value is not None and value not in allowed:
        del st.session_state[key]


def link_values(keys: Sequence[str]) -> dict[str, list[str]]:
    """What the URL asks of each of `keys` (their widgets bound to query parameters), read before
    the widgets are drawn: a widget drops a value it cannot take from the URL without a word."""
    return {k: st.query_params.get_all(k) for k in keys if k in st.query_params}


def _as_link(value: object) -> list[str]:
    """A widget's value as its query parameter's values."""
    if value is None:
        return []
    if isinstance(value, list | tuple):
        return [v.isoformat() if isinstance(v, date) else str(v) for v in value]
    if isinstance(value, bool):
        return [str(value).lower()]
    return [value.isoformat() if isinstance(value, date) else str(value)]


def warn_link_fallbacks(asked: dict[str, list[str]], shown: dict[str, str]) -> None:
    """After the widgets of `asked` (from `link_values`) are drawn: one warning per URL parameter
    whose value the widget did not take, naming the parameter, the value asked for and what is
    shown instead (`shown[key]`, e.g. "all VCs"). URL values are untrusted: shown as plain text."""
    for key, values in asked.items():
        kept = _as_link(st.session_state.get(key))
        if [v for v in values if v] == kept:
            continue
        bad = [v for v in values if v not in kept] or values
        st.warning(
            f"The link's {key}={plain(', '.join(bad))} is not a choice here: showing "
            f"{plain(shown[key])} instead.",
            icon=":material/link_off:",
        )


def _listed(what: str, values: Sequence[object], none: str) -> str:
    return f"{what} {', '.join(str(v) for v in values)}" if values else none


def sidebar_filters() -> Filters:
    """Draw the filters in the sidebar, in a popover; their keys are the URL query parameters.
    A value in the URL that no filter can take (an unknown cluster, a bad day) gets a warning on
    the page.

    In a popover because the browser builds its content only once it is opened, while the
    script still runs every filter (their values, their URL): a new tab of any page then skips
    building six widgets it rarely needs (bench/RESULTS.md, "Dashboard on 1 M jobs")."""
    asked = link_values(FILTER_KEYS)
    opts = data.fetch(queries.filter_options)
    clusters = opts["cluster"].unique(maintain_order=True).to_list()
    with st.sidebar.popover("Filters", icon=":material/filter_list:", width="stretch"):
        _prune(CLUSTER, clusters)
        cluster = st.selectbox("Cluster", clusters, key=CLUSTER, bind="query-params")
        mine = opts.filter(pl.col("cluster") == cluster)
        vcs = mine["vc"].drop_nulls().to_list()
        _prune(VC, vcs)
        st.multiselect("Virtual cluster", vcs, key=VC, bind="query-params", placeholder="all VCs")
        model_filter(cluster)
        period_filter(mine["first_day"].min(), mine["last_day"].max())
        st.text_input("User", key=USER, bind="query-params", placeholder="all users")
        st.multiselect("Job size (GPUs)", SIZE_CLASSES, key=SIZE, bind="query-params",
                       placeholder="all sizes")  # fmt: skip
        st.multiselect("Final state", STATES, key=STATE, bind="query-params",
                       placeholder="all states")  # fmt: skip
        st.caption("The view lives in the URL: copy the address to share it.")
    f = current_filters()
    days = f"{f.start} to {f.end}" if f.start else "the whole analyzed window"
    warn_link_fallbacks(asked, {
        CLUSTER: f"cluster {f.cluster}", VC: _listed("VC", f.vcs, "all VCs"),
        MODEL: _listed("GPU model", f.models, "all GPU models"), PERIOD: days,
        USER: f"user {f.user}" if f.user else "all users",
        SIZE: _listed("size", f.sizes, "all sizes"), STATE: _listed("state", f.states, "all states"),
    })  # fmt: skip
    return f


def period_filter(first: object, last: object) -> None:
    """The period: a range of UTC days over the cluster's window, applied as the handle is let
    go (a typed date field applied only once it lost focus). Its whole range is no period."""
    if not (isinstance(first, date) and isinstance(last, date) and first < last):
        st.session_state.pop(PERIOD, None)
        st.session_state.pop(PERIOD_BOUNDS, None)
        return
    st.session_state[PERIOD_BOUNDS] = (first, last)
    asked = st.session_state.get(PERIOD)
    if isinstance(asked, list | tuple) and not all(
        isinstance(d, date) and first <= d <= last for d in asked
    ):
        del st.session_state[PERIOD]  # outside the window: the link's warning says so
    st.slider("Period (UTC days)", min_value=first, max_value=last, value=(first, last),
              key=PERIOD, bind="query-params", format="YYYY-MM-DD",
              help="The whole range: the whole analyzed window.")  # fmt: skip


def model_filter(cluster: str | None) -> None:
    """The GPU model filter (jobs' models, job_usage.gpu_model), drawn only when the cluster's
    jobs name two models or more: with one, every page is that model's already."""
    opts = data.fetch(queries.model_options).filter(pl.col("cluster") == cluster)
    models = opts["gpu_model"].drop_nulls().to_list()
    _prune(MODEL, models)
    if len([m for m in models if m != UNKNOWN_MODEL]) < 2:
        st.session_state.pop(MODEL, None)
        return
    st.multiselect(
        "GPU model",
        models,
        key=MODEL,
        bind="query-params",
        placeholder="all GPU models",
        help="The job's GPU model: that of its GPUs, 'mixed' when they are of several models, "
        "'(unknown)' when no source names it.",
    )


def open_requested_job(job_page: Any) -> None:
    """After a click in a job table: go to the Job page with the job in the URL. The filters'
    own parameters follow from their widgets (bound parameters cannot be passed here)."""
    job_id = st.session_state.pop(OPEN_JOB, None)
    if not job_id:
        return
    st.session_state.pop(JOB, None)
    st.switch_page(job_page, query_params={JOB: str(job_id)})


PERIOD_BOUNDS = "_period_bounds"  # the period slider's ends: the whole window, no period


def current_filters() -> Filters:
    state = {k: st.session_state.get(k) for k in FILTER_KEYS}
    period = state[PERIOD]
    if isinstance(period, list | tuple) and tuple(period) == st.session_state.get(PERIOD_BOUNDS):
        state[PERIOD] = None
    return Filters.from_state(state)


_BACKTICKS = re.compile(r"`+")


def plain(value: object) -> str:
    """Untrusted text (URL parameters, names from the data, errors quoting either) for any text
    Streamlit renders as Markdown: st.markdown/warning/info/error/caption, and the labels of
    widgets, tabs, expanders and metrics. The pages' one escaping helper.

    Control characters become escapes as in the terminal (`safe_text`), then the text is one
    inline code span. Backslash escapes are not enough: Streamlit's Markdown turns a bare
    `http://...` of a text into a link after the escapes are read (GFM autolink literals are
    found in the parsed text); nothing is read inside a code span (CommonMark's code spans
    hold their text as is). Its fence is one backtick longer than the longest run inside, with
    a space on each side when the text starts or ends with one (CommonMark takes one off each
    side, unless the text is only spaces)."""
    text = safe_text(value)
    if not text:
        return ""
    fence = "`" * (max((len(m) for m in _BACKTICKS.findall(text)), default=0) + 1)
    pad = " " if text.strip(" ") and (text[0] in "` " or text[-1] in "` ") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def data_age(cluster: str | None, seen: datetime | None = None) -> None:
    """For a page that speaks of "now": how old the cluster's newest analyzed data are (or
    `seen`, a later time the page's own rows reach), as a caption, or as a warning once they are
    late (`freshness.lateness`)."""
    newest = freshness.newest_data(data.cluster_freshness(), cluster)
    if seen is not None:
        seen = seen.astimezone(UTC)
        newest = seen if newest is None else max(newest, seen)
    late = freshness.lateness(newest, datetime.now(UTC), data.update_interval_s())
    if late:
        st.warning(late, icon=":material/update:")
    elif newest is not None:
        age = freshness.age_text((datetime.now(UTC) - newest).total_seconds())
        st.caption(
            f"Data up to {newest:%Y-%m-%d %H:%M} UTC ({age} ago); `gpuwaste ingest` and "
            "`gpuwaste analyze` bring them up to date."
        )


def show_view(f: Filters) -> None:
    """The current filters as one line of plain text (user names are untrusted)."""
    st.text(safe_text(f.describe()))


def _open_job(key: str, ids: list[str]) -> None:
    state = st.session_state.get(key)
    rows = state.selection.rows if state is not None else []
    if rows:
        st.session_state[OPEN_JOB] = ids[rows[0]]


# A job list's columns, in this order: what an operator acts on first, then what tells the job
# apart; few enough to fit the page's width (the Job page shows the rest; the cluster is the
# sidebar's).
JOB_COLUMNS = ("job_id", "user", "lost_gpu_h", "lost_cost", "gpu_h", "gpus", "util_mean",
               "never_used_gpus", "state", "start_ts", "end_ts", "vc")  # fmt: skip


MONEY = ("cost", "lost_cost")


def priced(df: pl.DataFrame) -> bool:
    """True when some money column of `df` has a value ([cost] prices some of its GPUs)."""
    return any(c in df.columns and df[c].null_count() < df.height for c in MONEY)


def without_unpriced(df: pl.DataFrame) -> pl.DataFrame:
    """`df` without its money columns when none has a value: money only where [cost] prices the
    GPUs."""
    return df if priced(df) else df.drop([c for c in MONEY if c in df.columns])


def without_unsplit_model(df: pl.DataFrame) -> pl.DataFrame:
    """A summary's rows without their GPU model column when every row is of all models (no
    model picked in the filter): the column would only repeat '(all)'."""
    return df.drop("gpu_model") if (df["gpu_model"] == ALL_MODELS).all() else df


def job_table(df: pl.DataFrame, key: str, height: int | Literal["auto"] = "auto") -> None:
    """A table of job_usage rows, readable; selecting a row opens the job on the Job page."""
    df = df.select(c for c in JOB_COLUMNS if c in df.columns)
    table(readable(df, titles={"util_mean": "Mean util. of its GPUs (%)"}),
          name=key.removesuffix("_table"), empty="No jobs match this view.", key=key,
          open_jobs=True, height=height)  # fmt: skip


TIME_FORMAT = columns.TIME_FORMAT
RUNNING = "running"
# A shown title's decimals (gpuwaste.columns: one rule per unit), for the table's number format.
_TITLE_DECIMALS = {
    c.title: columns.DECIMALS[c.unit]
    for c in columns.COLUMNS.values()
    if c.unit in columns.DECIMALS
}


def readable(frame: pl.DataFrame, titles: dict[str, str] | None = None) -> pl.DataFrame:
    """A result frame as an operator reads it, by gpuwaste.columns (the terminal's titles and
    units): GPU seconds as GPU hours (delays in minutes), rounded to their unit's decimals;
    times as `YYYY-MM-DD HH:MM` in UTC; a running job's end as "running", other missing text or
    time as empty (never "None"); yes/no for booleans (a check box looks like a control); codes
    as words (columns.code_words); money only where [cost] prices the GPUs; titles with their
    unit, then `titles` for this page's meaning of a column."""
    frame = without_unpriced(frame)
    running = pl.col("state") == RUNNING if "state" in frame.columns else pl.lit(False)
    yes, no = columns.TRUE_FALSE
    out = []
    for name, dtype in frame.schema.items():
        spec = columns.column(name)
        col = pl.col(name)
        if isinstance(dtype, pl.Datetime):
            if dtype.time_zone:
                col = col.dt.convert_time_zone("UTC")
            col = col.dt.strftime(TIME_FORMAT)
            if name == "end_ts":
                col = pl.when(col.is_null() & running).then(pl.lit(RUNNING)).otherwise(col)
            col = col.fill_null("")
        elif dtype == pl.Boolean:
            col = pl.when(col).then(pl.lit(yes)).when(col.not_()).then(pl.lit(no))
            col = col.otherwise(pl.lit(""))
        elif dtype == pl.String:
            if spec.code:  # columns.code_words, on the whole column
                words = col.str.replace_all("_", " ").str.replace_all(",", ", ")
                col = pl.when(col.is_in(list(columns.METRICS))).then(col.replace(columns.METRICS))
                col = col.otherwise(words)
            col = col.fill_null("")  # Streamlit shows a missing text as "None"
        elif dtype.is_float() or spec.factor != 1:
            decimals = columns.DECIMALS.get(spec.unit or "number", columns.DECIMALS["number"])
            col = (col * spec.factor).round(decimals)
        out.append(col.alias((titles or {}).get(name, spec.title)))
    return frame.select(out)


def number_formats(frame: pl.DataFrame) -> dict[str, Any]:
    """st.dataframe's formats for `frame`'s numbers (titled by `readable`): thousands separated,
    a float column always with its unit's decimals (0.5 and 110.0, not 0.5 and 110); a title a
    page chose itself keeps as many decimals as its values have."""
    out: dict[str, Any] = {}
    for name, dtype in frame.schema.items():
        if dtype.is_float():
            decimals = _TITLE_DECIMALS.get(name)
            if decimals is None:
                text = [f"{v:.2f}".rstrip("0") for v in frame[name].drop_nulls().to_list()]
                decimals = max((len(t.split(".")[1]) for t in text), default=1)
            out[name] = st.column_config.NumberColumn(format=f"%,.{decimals}f")
        elif dtype.is_integer():
            out[name] = st.column_config.NumberColumn(format="%,d")
    return out


def _merged(default: Any, given: Any) -> Any:
    """A page's column configuration over the default one: what it leaves unset (None) stays."""
    if not isinstance(default, dict) or not isinstance(given, dict):
        return given if given is not None else default
    keys = default.keys() | given.keys()
    return {k: _merged(default.get(k), given.get(k)) for k in keys}


GPU_H = "GPU h"  # the unit on a figure tile of GPU hours ("30" alone read as 30 GPUs)


def gpu_hours(value: float, decimals: int = 0) -> str:
    """A figure tile's GPU hours, with their unit."""
    return f"{value:,.{decimals}f} {GPU_H}"


def count(n: int, thing: str) -> str:
    """A figure tile's count, with what it counts: `1 GPU`, `1,024 jobs` (a bare number on a
    tile reads as any unit)."""
    return f"{n:,} {thing}" if n == 1 else f"{n:,} {thing}s"


def csv_name(name: str, f: Filters) -> str:
    """The download's file name: the table's name, then the view, e.g.
    `top-jobs_cluster-demo_vc-nlp.csv` (`_all-clusters` when no filter is set)."""
    return f"{file_part(name)}_{f.slug()}.csv"


def table(
    frame: pl.DataFrame,
    empty: str = "No rows in this view.",
    *,
    name: str = "table",
    key: str | None = None,
    open_jobs: bool = False,
    height: int | Literal["auto"] = "auto",
    filters: Filters | None = None,
    column_config: dict[str, Any] | None = None,
) -> None:
    """Draw `frame` as a table, with a "Download CSV" button under it.

    The CSV is exactly `frame`: the same columns, titles, values and rows as shown (so give the
    frame its human column titles and formatted values before calling, see `readable`). Its file
    name is `csv_name(name, filters)`: `name` (e.g. "top jobs") then the view's filters
    (`filters` defaults to the sidebar's).

    - `empty`: the st.info shown instead when `frame` has no rows (no button then).
    - `key`: the table's widget key; the button's key is `"csv_" + key`, else made of `name` and
      the column titles (so two tables on a page need a different `name`, columns or `key`).
    - `open_jobs=True`: `frame` has a `job_id` column (or "Job id", its readable title) and
      selecting a row opens that job on the Job page (`key` required).
    - `column_config`: passed to st.dataframe (widths, number formats); the CSV is unaffected.
    """
    if frame.height == 0:
        st.info(empty)
        return
    formats = number_formats(frame)
    if JOB_ID in frame.columns:
        # wide enough for the longest id: ids that share a long prefix (Philly's
        # application_<cluster>_<n>) differ at their end, which a narrow column cut off
        longest = frame[JOB_ID].cast(pl.String).str.len_chars().max()
        longest = longest if isinstance(longest, int) else 0
        formats[JOB_ID] = st.column_config.TextColumn(width=min(8 * longest + 24, 320))
    for name, conf in (column_config or {}).items():
        formats[name] = _merged(formats.get(name), conf)
    options: dict[str, Any] = {"hide_index": True, "height": height, "column_config": formats}
    if open_jobs:
        if key is None:
            raise ValueError("a job table needs a key")
        ids = frame[JOB_ID if JOB_ID in frame.columns else "job_id"].to_list()
        options.update(on_select=partial(_open_job, key, ids), selection_mode="single-row")
    st.dataframe(frame, key=key, **options)
    if open_jobs:
        st.caption("Select a row to open the job.")
    st.download_button(
        "Download CSV",
        frame.write_csv().encode(),
        file_name=csv_name(name, filters or current_filters()),
        mime="text/csv",
        key=f"csv_{key}"
        if key
        else f"csv_{file_part(name)}_{zlib.crc32(str(frame.columns).encode())}",
        on_click="ignore",
        icon=":material/download:",
        help=f"This table ({frame.height:,} rows) as shown, as CSV.",
    )


def plot(spec: charts.Spec, key: str) -> None:
    """A chart of charts.py; its title is also its accessible name (the page's aria-label)."""
    # a facet sizes itself (Streamlit's default); everything else takes the column's width
    width: Literal["stretch"] | None = None if "facet" in spec else "stretch"
    st.vega_lite_chart(spec, key=key, alt=charts.title_of(spec), width=width)


# The filters the waits behind idle GPUs follow (queries._queue_idle_where): a holder is a user in a
# VC, whose idle GPUs span its jobs of every model, size and state.
WAITED_BEHIND_IDLE_FILTERS = (
    "the cluster and period filters (the waits that overlap the period), and the VC and user "
    "filters as those of the idle GPUs' holder (with a user: other users' waits behind that "
    "user's idle GPUs); not the GPU model, size or state filters (a holder's idle GPUs span its "
    "jobs of every model, size and state)"
)


def waited_behind_idle(f: Filters) -> None:
    """The one figure of waiting behind idle GPUs that the Overview and the Waste tables show
    (the Queue and failures page has the rest): GPU hours other users' jobs waited while GPUs
    were allocated and idle, and over how many waits."""
    row = data.fetch(queries.queue_idle_total, f).row(0, named=True)
    if not row["waits"]:
        return
    st.metric(
        "GPU hours jobs waited behind idle GPUs",
        gpu_hours(float(row["blocked_gpu_h"])),
        count(row["waits"], "wait"),
        delta_color="off",
        delta_arrow="off",
        help="While these jobs waited for lack of room (capacity or fragmentation; fair-share: "
        "idle GPUs of their own VC), other users' jobs held GPUs allocated and idle that could "
        "have run them (at most each waiting job's GPUs x that wait). Per user and VC on the "
        "Queue and failures page.",
    )
    st.caption(f"The waits behind idle GPUs follow {WAITED_BEHIND_IDLE_FILTERS}.")
