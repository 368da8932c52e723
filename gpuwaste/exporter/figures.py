"""The exporter's figures, read from the warehouse on a read-only connection.

Nothing here defines a metric anew: the GPU seconds are the result tables' settled rows summed
per VC (`sql/exporter/gpu_seconds.sql`, settled as of the newest sample analyze saw, which the
freshness records), the window hours are the result tables' GPU seconds clipped
to trailing windows (`sql/exporter/window_hours.sql`), the idle running jobs are the dashboard's
"Running now" query (`analyses.reads.idle_now`), and the pipeline's health is the freshness
`gpuwaste report` prints (`analyses.freshness`) with the quarantine counts of the Overview page
(`analyses.reads.source_states`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import polars as pl

from gpuwaste.analyses import freshness, reads
from gpuwaste.analyses.sqlfiles import load_sql
from gpuwaste.errors import GpuwasteError
from gpuwaste.warehouse.reading import read_frame
from gpuwaste.warehouse.readonly import read_only_connection
from gpuwaste.warehouse.store import Warehouse

OTHER_JOBS = "(other)"  # the job_id of the aggregate of the idle jobs beyond the top N
IDLE_JOB_SCHEMA: dict[str, pl.DataType] = {
    "cluster": pl.String(),
    "job_id": pl.String(),
    "user": pl.String(),
    "vc": pl.String(),
    "gpus": pl.Int64(),
    "idle_s": pl.Float64(),
}


class NoResults(GpuwasteError):
    """The warehouse is missing or holds no analysis results yet; the message says what to run."""


@dataclass(frozen=True)
class Figures:
    """Everything one scrape serves, as read at `computed_at` (UTC)."""

    computed_at: datetime
    totals: pl.DataFrame  # gpu_seconds.sql: cluster, vc, and the seconds of each kind
    windows: pl.DataFrame  # window_hours.sql: cluster, vc, window, *_gpu_h, wasted_money
    idle_jobs: pl.DataFrame  # IDLE_JOB_SCHEMA: the top N, then one OTHER_JOBS row per cluster
    idle_counts: pl.DataFrame  # cluster, jobs: every running job idle on all its GPUs
    freshness: pl.DataFrame  # analyses.freshness.freshness: per cluster x source
    quarantine: pl.DataFrame  # cluster, source, quarantined
    data_until: pl.DataFrame  # cluster, until: where the cluster's windows end


def check_results(data_dir: Path) -> None:
    """Raise NoResults unless `data_dir` is a warehouse with analysis results."""
    if not Path(data_dir).is_dir():
        raise NoResults(
            f"no warehouse at {data_dir}: run `gpuwaste ingest` then `gpuwaste analyze` "
            "(or `gpuwaste demo`)."
        )
    if not Warehouse(data_dir).clusters("job_usage"):
        raise NoResults(
            f"the warehouse at {data_dir} has no analysis results yet: run `gpuwaste analyze`."
        )


def top_idle_jobs(idle: pl.DataFrame, top: int) -> pl.DataFrame:
    """`idle_now`'s rows (most idle GPU hours first) cut to the first `top`, and the rest summed
    per cluster into one OTHER_JOBS row: its GPUs summed, its idle time the longest of them. So
    the series count is bounded by top + clusters."""
    rows = idle.select(
        "cluster", "job_id", "user", "vc", pl.col("gpus").cast(pl.Int64),
        idle_s=(pl.col("as_of") - pl.col("idle_since")).dt.total_microseconds() / 1e6,
    )  # fmt: skip
    head, rest = rows.head(top), rows.slice(top)
    other = (
        rest.group_by("cluster", maintain_order=True)
        .agg(
            job_id=pl.lit(OTHER_JOBS),
            user=pl.lit(""),
            vc=pl.lit(""),
            gpus=pl.col("gpus").sum(),
            idle_s=pl.col("idle_s").max(),
        )
        .sort("cluster")
    )
    return pl.concat([head, other]).cast(IDLE_JOB_SCHEMA)  # type: ignore[arg-type]


def read_figures(data_dir: Path, top_jobs: int, now: datetime) -> Figures:
    """Read every figure; NoResults when there is nothing to serve. Read-only throughout."""
    check_results(data_dir)
    fresh = freshness.freshness(data_dir)
    con = read_only_connection(data_dir)
    try:
        analyzed = fresh.select("cluster", samples_until="analyzed_up_to").unique("cluster")
        con.register("analyzed_until", analyzed.to_arrow())
        totals = read_frame(con, load_sql("exporter/gpu_seconds"))
        windows = read_frame(con, load_sql("exporter/window_hours"))
        data_until = read_frame(
            con, "SELECT cluster, max(end_ts) AS until FROM job_gpu_usage GROUP BY ALL"
        )
        idle = reads.idle_now(con)
        quarantine = reads.source_states(con).select("cluster", "source", "quarantined")
    finally:
        con.close()
    return Figures(
        computed_at=now,
        totals=totals,
        windows=windows,
        idle_jobs=top_idle_jobs(idle, top_jobs),
        idle_counts=idle.group_by("cluster").agg(jobs=pl.len()).sort("cluster"),
        freshness=fresh,
        quarantine=quarantine,
        data_until=data_until,
    )
