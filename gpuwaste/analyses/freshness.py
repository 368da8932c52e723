"""How fresh each cluster's results are: last ingest per source, last analyze, newest sample.

`gpuwaste report` prints it and warns about stale clusters and about data older than
LATE_AFTER_UPDATES scheduled updates (`lateness`, as the dashboard's pages about "now" and
`gpuwaste notify` do); the dashboard's Overview shows it.
Reads only small files: `ingest_state`, `analyze_state/<cluster>.json` and, for the newest
sample, the files of each cluster's latest `gpu_samples` day partition.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import duckdb
import polars as pl

from gpuwaste.analyses import state
from gpuwaste.warehouse.bookkeeping import LOGS_SOURCE
from gpuwaste.warehouse.reading import read_rows
from gpuwaste.warehouse.store import Warehouse

UTC_TS = pl.Datetime("us", "UTC")
SCHEMA: dict[str, pl.DataType] = {
    "cluster": pl.String(),
    "source": pl.String(),
    "ingested_at": UTC_TS,
    "watermark": UTC_TS,
    "samples_newest": UTC_TS,
    "analyzed_at": UTC_TS,
    "analyzed_up_to": UTC_TS,
    "stale": pl.Boolean(),
    "stale_reason": pl.String(),
}


def newest_sample_ts(wh: Warehouse, cluster: str) -> datetime | None:
    """The latest `gpu_samples.ts` of `cluster` (read from its latest day partition only)."""
    days = sorted(wh.cluster_dir("gpu_samples", cluster).glob("date=*"))
    for day in reversed(days):
        files = [p for p in day.glob("*.parquet") if ".tmp-" not in p.name]
        if not files:
            continue
        con = duckdb.connect(":memory:")
        try:
            rows = read_rows(con, "select max(ts) from read_parquet($1)", [[str(p) for p in files]])
        finally:
            con.close()
        if rows and rows[0][0] is not None:
            value: datetime = rows[0][0]
            return value.astimezone(UTC)
    return None


def _parse(text: str) -> datetime | None:
    return datetime.fromisoformat(text).astimezone(UTC) if text else None


def _stale_reason(
    ingested: list[datetime | None],
    samples_newest: datetime | None,
    analyzed_at: datetime | None,
    analyzed_up_to: datetime | None,
) -> str | None:
    """Why the cluster's results are older than its data, or None when they are current."""
    if analyzed_at is None:
        return "never analyzed: run `gpuwaste analyze`"
    if samples_newest is not None and (analyzed_up_to is None or samples_newest > analyzed_up_to):
        up_to = analyzed_up_to.isoformat() if analyzed_up_to else "no samples"
        return (
            f"samples reach {samples_newest.isoformat()} but results only {up_to}: "
            "run `gpuwaste analyze`"
        )
    later = [t for t in ingested if t is not None and t > analyzed_at]
    if later:
        return (
            f"ingested at {max(later).isoformat()}, after the last analyze at "
            f"{analyzed_at.isoformat()}: run `gpuwaste analyze`"
        )
    return None


def freshness(data_dir: Path) -> pl.DataFrame:
    """One row per cluster x ingest source (source null for a cluster with no ingest state),
    sorted by cluster and source. Columns (times are UTC):

    - `cluster`, `source`: the ingest source (`ingest_state.source`, e.g. slurm, openmetrics).
    - `ingested_at`: when that source was last ingested (`ingest_state.updated_at`).
    - `watermark`: how far that source's data reaches (`ingest_state.watermark`).
    - `samples_newest`: the newest GPU sample of the cluster in the warehouse now.
    - `analyzed_at`: when `gpuwaste analyze` last finished the cluster (null: never).
    - `analyzed_up_to`: the newest GPU sample that analyze saw.
    - `stale`: the cluster's results are older than its data: never analyzed, samples newer than
      `analyzed_up_to`, or a source ingested after `analyzed_at`. The same on every row of a
      cluster.
    - `stale_reason`: one sentence saying why (null when not stale).
    """
    wh = Warehouse(data_dir)
    ingest = wh.read("ingest_state")
    analyzed = {p.stem for p in (Path(data_dir) / state.STATE_DIR).glob("*.json")}
    clusters = sorted(set(ingest["cluster"].to_list()) | analyzed | set(wh.clusters("jobs")))
    rows: list[dict[str, object]] = []
    for cluster in clusters:
        saved = state.load_meta(data_dir, cluster)
        analyzed_at = _parse(saved.ran_at) if saved else None
        up_to = _parse(saved.samples_until) if saved else None
        newest = newest_sample_ts(wh, cluster)
        mine = ingest.filter(pl.col("cluster") == cluster).sort("source")
        sources = mine.select("source", "updated_at", "watermark").rows() or [(None, None, None)]
        reason = _stale_reason([r[1] for r in sources], newest, analyzed_at, up_to)
        for source, ingested_at, watermark in sources:
            rows.append(
                {
                    "cluster": cluster,
                    "source": source,
                    "ingested_at": ingested_at,
                    "watermark": watermark,
                    "samples_newest": newest,
                    "analyzed_at": analyzed_at,
                    "analyzed_up_to": up_to,
                    "stale": reason is not None,
                    "stale_reason": reason,
                }
            )
    return pl.DataFrame(rows, schema=SCHEMA)


def _when(ts: datetime | None) -> str:
    return ts.strftime("%Y-%m-%d %H:%M:%S UTC") if ts else "never"


def _watermark_words(source: str) -> str:
    """What a source's watermark is, in the footer: a logs folder's is a file's mtime."""
    return "newest file written" if source == LOGS_SOURCE else "data up to"


def freshness_lines(
    data_dir: Path,
    clusters: list[str] | None = None,
    *,
    now: datetime | None = None,
    update_interval_s: float | None = None,
) -> list[str]:
    """Per cluster (all, or `clusters`): one line on when each source was ingested and when it
    was analyzed, a warning line when its results are older than its data and, given `now` and
    `update_interval_s`, one when its newest data are late (`late_warnings`)."""
    df = freshness(data_dir)
    if clusters is not None:
        df = df.filter(pl.col("cluster").is_in(clusters))
    lines = []
    for (cluster,), rows in df.group_by("cluster", maintain_order=True):
        first = rows.row(0, named=True)
        ingested = [
            f"{r['source']} ingested {_when(r['ingested_at'])} "
            f"({_watermark_words(r['source'])} {_when(r['watermark'])})"
            for r in rows.iter_rows(named=True)
            if r["source"] is not None
        ] or ["no ingest recorded"]
        analyzed = f"analyzed {_when(first['analyzed_at'])}"
        if first["analyzed_at"] is not None:
            up_to = first["analyzed_up_to"]
            analyzed += f" (samples up to {_when(up_to)})" if up_to else " (no GPU samples)"
        lines.append(f"{cluster}: {'; '.join(ingested)}; {analyzed}")
        if first["stale"]:
            lines.append(
                f"warning: {cluster}: results are older than the data: {first['stale_reason']}."
            )
        if now is not None and update_interval_s is not None:
            lines += late_warnings(rows, now, update_interval_s, REPORT_CONSEQUENCE)
    return lines


# Data older than this many scheduled updates ([exporter] update_interval_s) is late: the
# exporter's staleness alerts (deploy/prometheus/gpuwaste-rules.yml) fire at the same point.
LATE_AFTER_UPDATES = 3


def newest_data(fresh: pl.DataFrame, cluster: str | None = None) -> datetime | None:
    """How far a cluster's results reach (`analyzed_up_to`, else its newest sample, else, for a
    cluster without telemetry, the newest watermark of its scheduler sources: never a logs
    folder's, a file's mtime) in a `freshness` frame: the "now" of the pages and reports about
    running jobs, and what `lateness` judges."""
    rows = fresh if cluster is None else fresh.filter(pl.col("cluster") == cluster)
    for column in ("analyzed_up_to", "samples_newest"):
        value = rows[column].max() if rows.height else None
        if isinstance(value, datetime):
            return value.astimezone(UTC)
    if "watermark" in rows.columns:
        value = rows.filter(pl.col("source") != LOGS_SOURCE)["watermark"].max()
        if isinstance(value, datetime):
            return value.astimezone(UTC)
    return None


def age_text(seconds: float) -> str:
    """An age in the largest unit that keeps it readable: "12 min", "5.5 h", "26 days"."""
    if seconds < 3600:
        return f"{max(seconds, 0) / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.0f} days"


# What late data mean where they are read: the dashboard's pages about "now", `report`, `notify`.
RUNNING_CONSEQUENCE = "what is shown as running may have ended"
REPORT_CONSEQUENCE = "a period up to now (`--since 7d`) counts nothing after them"
NOTIFY_CONSEQUENCE = "the window's digests would count nothing after them"


def lateness(
    newest: datetime | None,
    now: datetime,
    update_interval_s: float,
    consequence: str = RUNNING_CONSEQUENCE,
) -> str | None:
    """One sentence when the data reach no later than LATE_AFTER_UPDATES scheduled updates ago
    (or not at all), saying how old they are, what that means (`consequence`) and what to run;
    None when they are recent."""
    if newest is None:
        return "No GPU sample has been analyzed: run `gpuwaste ingest`, then `gpuwaste analyze`."
    age = (now - newest).total_seconds()
    if age <= LATE_AFTER_UPDATES * update_interval_s:
        return None
    return (
        f"The newest data are {age_text(age)} old (up to {newest:%Y-%m-%d %H:%M} UTC), more "
        f"than {LATE_AFTER_UPDATES} scheduled updates ({LATE_AFTER_UPDATES} x "
        f"{update_interval_s:g} s, [exporter] update_interval_s): {consequence}. Run "
        "`gpuwaste ingest` and `gpuwaste analyze`, or schedule them."
    )


def late_warnings(
    fresh: pl.DataFrame,
    now: datetime,
    update_interval_s: float,
    consequence: str,
    needed_up_to: datetime | None = None,
) -> list[str]:
    """A `warning: <cluster>: ...` line (`lateness`) for each cluster of a `freshness` frame
    whose newest data are late: more than LATE_AFTER_UPDATES updates before `needed_up_to` (the
    end of the period read; default `now`), their age said from `now`. None for a cluster
    without any data (its other lines say why)."""
    out = []
    limit = LATE_AFTER_UPDATES * update_interval_s
    for cluster in fresh["cluster"].unique(maintain_order=True).to_list():
        newest = newest_data(fresh, cluster)
        if newest is None or ((needed_up_to or now) - newest).total_seconds() <= limit:
            continue
        late = lateness(newest, now, update_interval_s, consequence)
        if late:
            out.append(f"warning: {cluster}: {late[0].lower()}{late[1:]}")
    return out


__all__ = [
    "LATE_AFTER_UPDATES",
    "NOTIFY_CONSEQUENCE",
    "REPORT_CONSEQUENCE",
    "RUNNING_CONSEQUENCE",
    "SCHEMA",
    "age_text",
    "freshness",
    "freshness_lines",
    "late_warnings",
    "lateness",
    "newest_data",
    "newest_sample_ts",
]
