"""`gpuwaste report`: a result table as the study prints it, for one cluster and VC.

Summaries are read as written by `gpuwaste analyze`; with `since`, they are recomputed on the spot
by the same SQL over the jobs that started at or after that time, with the data reaching as far
as at the last analyze (its as_of: where running jobs end), so a report "since" never disagrees
with the definitions or the stored rows. Per-job tables are filtered the same way. An unknown cluster,
VC or GPU model is refused with the known ones.

Summaries are split by the job's GPU model (`gpu_model`, '(all)' = every model): by default the
report prints the '(all)' rows without the column (the table as the study prints it); `model`
keeps one model's rows, or `EACH_MODEL` every model's rows beside '(all)'.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from gpuwaste.analyses.freshness import freshness
from gpuwaste.analyses.period_summary import dated_rows, register_dated_inputs
from gpuwaste.analyses.registry import (
    ANALYSES,
    BY_NAME,
    CLUSTER_ROW_TABLES,
    PER_JOB_TABLES,
    SUMMARY_TABLES,
)
from gpuwaste.analyses.sqlfiles import device_variables, set_variables, threshold_variables
from gpuwaste.analyses.state import load_meta
from gpuwaste.config import Settings
from gpuwaste.errors import GpuwasteError, UsageError
from gpuwaste.warehouse.catalog import connect, view_sql
from gpuwaste.warehouse.reading import read_frame, read_rows, run
from gpuwaste.warehouse.results import (
    ALL_MODELS,
    ALL_VCS,
    FAILURE_REASONS_ORDER,
    SUMMARY_GRAIN,
    UNKNOWN_MODEL,
)
from gpuwaste.warehouse.schema import table
from gpuwaste.warehouse.store import Warehouse

FRESHNESS = "freshness"
REPORTS = (*SUMMARY_TABLES, *CLUSTER_ROW_TABLES, *PER_JOB_TABLES, FRESHNESS)
TITLES = {
    **{a.name: a.title for a in ANALYSES},
    FRESHNESS: "When each cluster was last ingested and analyzed (UTC)",
}


def _since_views(con: duckdb.DuckDBPyConnection, wh: Warehouse, since: datetime) -> None:
    """Redefine the per-job views to the jobs that started at or after `since`."""
    jobs_sql = view_sql(wh, table("job_usage"))
    run(
        con,
        f"create or replace view job_usage as select * from ({jobs_sql}) "
        f"where start_ts >= '{since.isoformat()}'::timestamptz",
    )
    for name in ("job_gpu_usage", "job_util_hist", "stable_phases", "idle_slots"):
        inner = view_sql(wh, table(name))
        run(
            con,
            f"create or replace view {name} as select * from ({inner}) as t "
            "where (t.cluster, t.job_id) in (select cluster, job_id from job_usage)",
        )


MAX_LISTED = 20
EACH_MODEL = "each"  # `--model each`: the rows of every model, and of '(all)'


def _known_values(
    con: duckdb.DuckDBPyConnection, name: str, column: str, flag: str, sql: str, params: list[Any]
) -> list[str]:
    """The values `flag` may take for table `name` (`sql`'s one column, with `params`), after
    refusing the flag for a table without `column`."""
    if column not in table(name).columns:
        raise UsageError(f"{flag} does not apply to {name}: it has no {column} column.")
    return [r[0] for r in read_rows(con, sql, params)]


def check_vc(con: duckdb.DuckDBPyConnection, name: str, clusters: list[str], vc: str) -> None:
    """Refuse `--vc` for a table without VCs, or a VC that no job of these clusters has."""
    known = _known_values(
        con,
        name,
        "vc",
        "--vc",
        "select distinct coalesce(vc, '(none)') as v from job_usage "
        "where cluster in (select unnest($1::varchar[])) union select $2 order by v",
        [clusters, ALL_VCS],
    )
    if vc in known:
        return
    listed = ", ".join(known[:MAX_LISTED])
    more = (
        f" and {len(known) - MAX_LISTED} more (`gpuwaste report waste_by_vc` lists them)"
        if len(known) > MAX_LISTED
        else ""
    )
    raise GpuwasteError(f"no VC '{vc}' in cluster(s) {', '.join(clusters)} (VCs: {listed}{more}).")


def check_model(con: duckdb.DuckDBPyConnection, name: str, clusters: list[str], model: str) -> None:
    """Refuse `--model` for a table without GPU models, or a model no job of these clusters
    ran on."""
    known = _known_values(
        con,
        name,
        "gpu_model",
        "--model",
        "select distinct gpu_model as m from job_usage "
        "where cluster in (select unnest($1::varchar[])) "
        "union select distinct coalesce(gpu_model, $2) from job_gpu_usage "
        "where cluster in (select unnest($1::varchar[])) "
        "union select $3 order by m",
        [clusters, UNKNOWN_MODEL, ALL_MODELS],
    )
    if model == EACH_MODEL or model in known:
        return
    raise GpuwasteError(
        f"no GPU model '{model}' in cluster(s) {', '.join(clusters)} "
        f"(models: {', '.join(known[:MAX_LISTED])}; or {EACH_MODEL} for every one)."
    )


# The summaries whose rows are per GPU model, with no '(all)' model row to show by default
# (waste_by_model: the models side by side; idle_power: a percentile over several models' samples
# is no model's idle power).
PER_MODEL = ("waste_by_model", "idle_power")


def _model_rows(out: pl.DataFrame, name: str, model: str | None) -> pl.DataFrame:
    """The rows of one GPU model (`model`), of every model (EACH_MODEL), or by default: a
    summary's '(all)' rows without the column (PER_MODEL: every row)."""
    if "gpu_model" not in out.columns or model == EACH_MODEL:
        return out
    if model is not None:
        return out.filter(pl.col("gpu_model") == model)
    split = table(name).key[: len(SUMMARY_GRAIN)] == SUMMARY_GRAIN
    if not split or name in PER_MODEL:
        return out
    return out.filter(pl.col("gpu_model") == ALL_MODELS).drop("gpu_model")


def _freshness(data_dir: Path, cluster: str | None) -> pl.DataFrame:
    df = freshness(data_dir)
    known = df["cluster"].unique(maintain_order=True).to_list()
    if cluster is None:
        return df
    if cluster not in known:
        raise GpuwasteError(
            f"no cluster '{cluster}' in {data_dir} (clusters: {', '.join(known) or 'none'})."
        )
    return df.filter(pl.col("cluster") == cluster)


def _analyzed_as_of(data_dir: Path, cluster: str) -> datetime | None:
    """How far the data of `cluster` reached at its last analyze (None: no analyze recorded)."""
    meta = load_meta(data_dir, cluster)
    return datetime.fromisoformat(meta.as_of) if meta and meta.as_of else None


def report(
    settings: Settings,
    name: str,
    *,
    cluster: str | None = None,
    vc: str | None = None,
    since: datetime | None = None,
    model: str | None = None,
) -> pl.DataFrame:
    """The rows of result table `name` (optionally one cluster, one VC, one GPU model or
    EACH_MODEL, jobs since a time)."""
    if name not in REPORTS:
        raise UsageError(f"no report named '{name}' (known: {', '.join(REPORTS)}).")
    data_dir: Path = settings.data_dir
    if name == FRESHNESS:
        return _freshness(data_dir, cluster)
    wh = Warehouse(data_dir)
    if not wh.has_files(name):
        raise GpuwasteError(f"no {name} table in {data_dir}: run `gpuwaste analyze` first.")
    clusters = [cluster] if cluster else wh.clusters(name)
    if cluster and cluster not in wh.clusters(name):
        raise GpuwasteError(
            f"no {name} rows for cluster '{cluster}' in {data_dir} "
            f"(clusters: {', '.join(wh.clusters(name))})."
        )
    con = connect(data_dir)
    try:
        if vc is not None:
            check_vc(con, name, clusters, vc)
        if model is not None:
            check_model(con, name, clusters, model)
        if since is not None:
            _since_views(con, wh, since)
        frames = []
        for c in clusters:
            if since is not None and name in BY_NAME and BY_NAME[name].dated_by:
                df = dated_rows(con, name, c, since)
            elif since is not None and name in (*SUMMARY_TABLES, *CLUSTER_ROW_TABLES):
                set_variables(
                    con,
                    {
                        **device_variables(settings, c),
                        **threshold_variables(settings.thresholds),
                        "cluster": c,
                        # where a running allocation ends, as the analyze that wrote the
                        # stored rows had it (staging/queue_wait_pieces.sql's untied ones)
                        "as_of": _analyzed_as_of(data_dir, c),
                    },
                )
                register_dated_inputs(con, name, c, since)
                df = BY_NAME[name].compute(con).with_columns(pl.lit(c).alias("cluster"))
            else:
                df = read_frame(con, f'select * from "{name}" where cluster = $1', [c])
            frames.append(df)
    finally:
        con.close()
    out = pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame()
    if vc is not None and "vc" in out.columns:
        out = out.filter(pl.col("vc") == vc)
    out = _model_rows(out, name, model)
    t = table(name)
    cols = [c for c in t.columns if c in out.columns]
    out = out.select(cols)
    if t.sort:
        out = out.sort([c for c in ("cluster", *t.sort) if c in out.columns], nulls_last=True)
    if name == "failure_reasons":
        out = _reasons_order(out)
    return out


def job_totals(
    settings: Settings,
    *,
    cluster: str | None = None,
    vc: str | None = None,
    since: datetime | None = None,
) -> str:
    """Every job of the cluster(s) (of `vc`, started since `since`), and how many of them never
    held a GPU, in words: "cluster demo has 260 jobs, 1 of which never held a GPU"."""
    con = connect(settings.data_dir)
    try:
        rows = read_rows(
            con,
            "select cluster, count(*), count(*) filter (where coalesce(gpus, 0) = 0) "
            "from job_usage where ($1::varchar is null or cluster = $1) "
            "and ($2::varchar is null or coalesce(vc, '(none)') = $2) "
            "and ($3::timestamptz is null or start_ts >= $3) group by cluster order by cluster",
            [cluster, None if vc == ALL_VCS else vc, since],
        )
    finally:
        con.close()
    scope = "" if vc in (None, ALL_VCS) else f" in VC {vc}"
    scope += "" if since is None else f" started since {since:%Y-%m-%d %H:%M} UTC"
    if len(rows) == 1:
        c, n, no_gpu = rows[0]
        return f"cluster {c} has {n} jobs{scope}, {no_gpu} of which never held a GPU"
    each = ", ".join(f"{c} {n} ({no_gpu} never held a GPU)" for c, n, no_gpu in rows)
    return f"jobs{scope} per cluster: {each or 'none'}"


def jobs_line(
    settings: Settings,
    words: str,
    *,
    cluster: str | None = None,
    vc: str | None = None,
    since: datetime | None = None,
    period: bool = False,
) -> str:
    """The line under a table saying which jobs its `jobs` column counts (`words`) beside every
    job of the cluster (`job_totals`): tables count different jobs (every job, those that held a
    GPU, those that started), and a reader comparing 259 with 260 is told why. Over a `period`
    that jobs overlap (`--by`, `policy replay`), no count of jobs started in it would match:
    the words alone."""
    if period:
        return f"Jobs counts {words} in the period."
    return f"Jobs counts {words}; {job_totals(settings, cluster=cluster, vc=vc, since=since)}."


def _reasons_order(out: pl.DataFrame) -> pl.DataFrame:
    """failure_reasons as Philly's Table 7 (and the dashboard) lists them: within each cluster,
    VC and model, in FAILURE_REASONS_ORDER."""
    if out.is_empty():
        return out
    groups = [c for c in ("cluster", "vc", "gpu_model") if c in out.columns]
    con = duckdb.connect(":memory:")
    try:
        con.register("reasons", out)
        order = ", ".join([*groups, FAILURE_REASONS_ORDER])
        return read_frame(con, f"select * from reasons order by {order}")
    finally:
        con.close()


__all__ = ["ALL_VCS", "EACH_MODEL", "REPORTS", "TITLES", "jobs_line", "report"]
