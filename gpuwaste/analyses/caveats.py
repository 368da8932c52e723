"""What a result table cannot tell on a cluster for lack of input, in the words the command line
(`gpuwaste report`, a note under the table) and the dashboard (the Queue and failures page)
share: a cluster without VC quotas has no fair-share delay judged, one without job logs no
failure reason from the logs. Without the note a reader takes the table's 0 fair-share or its
'no signature' rows for findings.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from gpuwaste.warehouse.catalog import connect
from gpuwaste.warehouse.reading import read_rows

QUOTAS_HINT = "`[clusters.vc_quotas]`, GPUs per VC; the Philly trace has none"
LOGS_HINT = (
    "ingest the jobs' stdout/stderr with `gpuwaste ingest logs --dir D --cluster C` "
    "(the Philly trace has no logs)"
)


def _scope(clusters: list[str] | None) -> str:
    if not clusters:
        return "here"
    return f"in cluster{'s' if len(clusters) > 1 else ''} {', '.join(clusters)}"


def fair_share_not_judged(clusters: list[str] | None = None) -> str:
    """The sentence for rows whose `fair_share_judged` is false (of `clusters`, None: the view)."""
    return (
        f"Fair-share is not judged for every VC {_scope(clusters)}: VC quotas are not configured "
        f"for all of them ({QUOTAS_HINT}), so a fair-share of 0 there means not judged, not no "
        "fair-share delay."
    )


def fair_share_unjudged(df: pl.DataFrame) -> pl.DataFrame:
    """The rows of a queue_cause_summary frame (none for another table) whose waits were not
    judged for fair-share: a group without waits has nothing to judge, though its
    `fair_share_judged` is false too."""
    if "fair_share_judged" not in df.columns:
        return df.clear()
    waited = pl.col("waits") > 0 if "waits" in df.columns else pl.lit(True)
    return df.filter(~pl.col("fair_share_judged").fill_null(False) & waited)


def no_logs(clusters: list[str]) -> str:
    """The sentence for failure reasons of `clusters`, which have no job logs ingested."""
    return (
        f"No job logs {_scope(clusters)}: a failure the scheduler does not explain is 'no "
        f"signature', not a job without an error; {LOGS_HINT}."
    )


def clusters_without_logs(data_dir: Path, clusters: list[str]) -> list[str]:
    """Those of `clusters` without a job_logs row."""
    con = connect(data_dir)
    try:
        logged = {r[0] for r in read_rows(con, "select distinct cluster from job_logs", [])}
    finally:
        con.close()
    return [c for c in clusters if c not in logged]


def table_caveats(data_dir: Path, df: pl.DataFrame) -> list[str]:
    """The notes a report's rows `df` need: fair-share not judged where rows with waits have
    `fair_share_judged` false, no job logs where a table of failure reasons (a `reason` column)
    shows a cluster without any."""
    notes = []
    clusters = df["cluster"].unique(maintain_order=True).to_list() if "cluster" in df else []
    unjudged = fair_share_unjudged(df)
    if unjudged.height:
        where = unjudged["cluster"].unique(maintain_order=True).to_list() if clusters else None
        notes.append(fair_share_not_judged(where))
    if "reason" in df.columns and clusters:
        without = clusters_without_logs(data_dir, clusters)
        if without:
            notes.append(no_logs(without))
    return notes


__all__ = [
    "LOGS_HINT",
    "clusters_without_logs",
    "fair_share_not_judged",
    "fair_share_unjudged",
    "no_logs",
    "table_caveats",
]
