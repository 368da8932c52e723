"""The failures section of the Queue and failures page [Philly §4.2, Table 7]: failed attempts by
reason, and the drill-down to each attempt with its matched log line (a row opens the job)."""

from __future__ import annotations

import polars as pl
import streamlit as st

from gpuwaste import columns
from gpuwaste.analyses.caveats import LOGS_HINT
from gpuwaste.dashboard import data, widgets
from gpuwaste.dashboard import queries as q
from gpuwaste.dashboard.filters import Filters

TABLE_7 = {
    "reason": "Failure reason",
    "sources": "Sources (IF, AE, U)",
    "trials": "Trials",
    "jobs": "Jobs",
    "users": "Users",
    # their declarations' titles: widgets.readable converts to the declared unit (minutes)
    **{c: columns.title(c) for c in ("rtf_p50_s", "rtf_p90_s", "rtf_p95_s")},
    "rtf_pct": "RTF (% of total)",
    "trials_1gpu": "Demand 1 GPU",
    "trials_2_4gpu": "Demand 2-4 GPUs",
    "trials_gt4gpu": "Demand >4 GPUs",
    "gpu_h": "GPU hours burned",
    "rtf_x_demand_pct": "RTF x demand (%)",
    "per_job": "Repeats per job",
    "per_user": "Repeats per user",
}
ATTEMPTS = {
    "reason": "Failure reason",
    "attempt": "Attempt",
    "origin": "Reason from",
    "runtime_min": "Runtime to failure (min)",
    "raw_state": "Scheduler state",
    "exit_code": "Exit code",
    "exit_signal": "Signal",
    "log_path": "Log file",
    "line_no": "Line",
    "line": "Matched log line",
}
EVERY = "(every reason)"


def failures_section(f: Filters, frames: dict[str, pl.DataFrame]) -> None:
    """Table 7 for the view, then the failed attempts of a chosen reason (`frames`: the page's,
    `data.queue`)."""
    st.subheader("Why jobs failed (Philly Table 7)")
    st.caption(
        "Each failed attempt (an attempt that was retried, or the last of a failed or killed "
        "job) gets one reason: the scheduler's (node failure, time limit, CPU OOM, preempted, "
        "cancelled by a user or an admin), else the job's logs (`gpuwaste ingest logs`: the most "
        "specific signature rule matched), else a FAILED job's signal (after the colon of its "
        "exit code, or an exit status of 128 + N read as signal N), else 'no signature'. RTF: "
        "runtime to failure; RTF x demand: the GPU time the failures burned. Sources: IF "
        "infrastructure, AE AI engine, U user."
    )
    reasons = widgets.without_unsplit_model(frames["reasons"])
    table7 = reasons.select(c for c in ("vc", "gpu_model", *TABLE_7) if c in reasons.columns)
    widgets.table(
        widgets.readable(table7, TABLE_7),
        "No failed attempts in this view (run `gpuwaste analyze` after ingesting jobs).",
        name="failure reasons",
    )
    names = [r for r in reasons["reason"].unique(maintain_order=True).to_list() if r != "all"]
    if not names:
        return
    chosen = st.selectbox("Failed attempts of", [EVERY, *names], key="failure_reason")
    attempts = frames["attempts"] if chosen == EVERY else data.fetch(q.failure_attempts, f, chosen)
    widgets.table(
        widgets.readable(attempts, ATTEMPTS),
        "No failed attempts of this reason in this view.",
        name="failed attempts",
        key="failure_attempts_table",
        open_jobs=True,
    )
    if attempts.height >= q.FAILED_ATTEMPTS_SHOWN:
        st.caption(
            f"The {attempts.height:,} attempts that burned the most GPU time; narrow the view "
            "(period, user, VC) or query `failure_attempts` on the SQL page for every one."
        )
    if attempts.height and attempts["line"].null_count() == attempts.height:
        st.info(f"No attempt here has a matched log line: {LOGS_HINT}.", icon=":material/info:")
