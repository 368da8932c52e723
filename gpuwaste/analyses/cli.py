"""`gpuwaste analyze` and `gpuwaste report`."""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpuwaste.analyses.host_ranges import RANGE_MAX_SAMPLES
from gpuwaste.analyses.registry import BY_NAME, CLUSTER_ROW_TABLES, PER_JOB_TABLES, SUMMARY_TABLES
from gpuwaste.cli_common import ClusterOpt, ConfigOpt, DataDirOpt, FormatOpt, QuietOpt, settings
from gpuwaste.errors import UsageError
from gpuwaste.render import OutputFormat, most_first, render
from gpuwaste.warehouse.results import ROLLUP_COLUMNS

if TYPE_CHECKING:
    from gpuwaste.analyses.engines import LocalEngine
    from gpuwaste.analyses.engines.spark import SparkEngine


def print_freshness(
    data_dir: Path, cluster: str | None, update_interval_s: float | None = None
) -> None:
    """When each reported cluster was ingested and analyzed, on stderr (CSV/JSON stay clean);
    given `update_interval_s` (a period up to now was reported), a warning when its newest data
    are late, as the dashboard's pages about now judge it."""
    from datetime import UTC, datetime

    from gpuwaste.analyses.freshness import freshness_lines

    for line in freshness_lines(
        data_dir,
        [cluster] if cluster else None,
        now=datetime.now(UTC),
        update_interval_s=update_interval_s,
    ):
        print(line, file=sys.stderr)


def print_why_no_gpu_time(data_dir: Path, clusters: list[str]) -> None:
    """For each cluster whose jobs can give no GPU time, or whose allocations meet no samples
    as when its times were read in the wrong zone, say so (stderr: a warning)."""
    from gpuwaste.warehouse.diagnose import problems
    from gpuwaste.warehouse.store import Warehouse

    wh = Warehouse(data_dir)
    for cluster in clusters:
        for why in problems(wh, cluster):
            print(f"gpuwaste: {why}", file=sys.stderr)


class Engine(StrEnum):
    local = "local"
    spark = "spark"


def chosen_engine(
    engine: Engine, spark_master: str | None, spark_remote: str | None
) -> LocalEngine | SparkEngine:
    """The engine the flags ask for; Spark flags without `--engine spark`, or both of them, are
    a mistake said in one sentence."""
    from gpuwaste.analyses.engines import LocalEngine

    given = [
        f for f, v in (("--spark-master", spark_master), ("--spark-remote", spark_remote)) if v
    ]
    if engine is Engine.local:
        if given:
            raise UsageError(f"{given[0]} is for --engine spark; add --engine spark.")
        return LocalEngine()
    if len(given) > 1:
        raise UsageError("give either --spark-master or --spark-remote, not both.")
    if spark_remote and "token=" in spark_remote.lower():
        raise UsageError(
            "--spark-remote must not carry a token (a command line is visible to every user of "
            "the machine): put it in the environment variable SPARK_CONNECT_AUTHENTICATE_TOKEN."
        )
    from gpuwaste.analyses.engines.spark import SparkEngine

    return SparkEngine(master=spark_master, remote=spark_remote)


# `report NAME`'s help, from the registry: every summary, freshness, every per-job table.
REPORT_NAME_HELP = (
    f"{SUMMARY_TABLES[0]} (default), {', '.join(SUMMARY_TABLES[1:])}, freshness, a table of "
    f"rows per waiting stretch ({', '.join(CLUSTER_ROW_TABLES)}), or a per-job "
    f"table ({', '.join(PER_JOB_TABLES)}). Not with --by."
)


def register(app: typer.Typer) -> None:
    """Add the analyses' commands to the main app."""

    @app.command()
    def analyze(
        config: ConfigOpt = None,
        data_dir: DataDirOpt = None,
        cluster: ClusterOpt = None,
        since: Annotated[
            str | None,
            typer.Option(help="Also recompute every job still running on or after this day."),
        ] = None,
        rebuild: Annotated[
            bool, typer.Option("--rebuild", help="Recompute every job (same tables).")
        ] = False,
        batch_days: Annotated[
            int, typer.Option("--batch-days", min=1, help="Days of job starts per batch.")
        ] = 7,
        batch_hosts: Annotated[
            int, typer.Option("--batch-hosts", min=1, help="Hosts per pass inside a batch.")
        ] = 8,
        range_samples: Annotated[
            int,
            typer.Option(
                "--range-samples",
                min=1,
                help="Samples per pass inside a batch, at most (foreseen from the passes before "
                "it; a host whose samples alone pass it is a pass of its own). A pass's memory "
                "follows it.",
            ),
        ] = RANGE_MAX_SAMPLES,
        quiet: QuietOpt = False,
        engine: Annotated[
            Engine,
            typer.Option(
                help="local: the batches in this process (no JVM). spark: the batches as the "
                "tasks of a Spark job (needs the spark extra of gpuwaste and Java 17; every "
                "worker must see the data directory at the same path)."
            ),
        ] = Engine.local,
        spark_master: Annotated[
            str | None,
            typer.Option(
                "--spark-master",
                help="With --engine spark: the master URL (spark://HOST:7077, k8s://..., "
                "local[2]); default: what spark-submit or the Spark configuration says.",
            ),
        ] = None,
        spark_remote: Annotated[
            str | None,
            typer.Option(
                "--spark-remote",
                help="With --engine spark: a Spark Connect server, sc://HOST:PORT (its token, "
                "if any, in SPARK_CONNECT_AUTHENTICATE_TOKEN).",
            ),
        ] = None,
    ) -> None:
        """Recompute the result tables for the jobs whose samples or records changed."""
        from gpuwaste.analyses.run import analyze as run_analyze
        from gpuwaste.analyses.run import since_date

        s = settings(config, data_dir)
        runs = run_analyze(
            s,
            clusters=[cluster] if cluster else None,
            rebuild=rebuild,
            since=since_date(since),
            batch_days=batch_days,
            batch_hosts=batch_hosts,
            range_samples=range_samples,
            quiet=quiet,
            engine=chosen_engine(engine, spark_master, spark_remote),
        )
        print_why_no_gpu_time(s.data_dir, [run.cluster for run in runs])

    @app.command()
    def report(
        name: Annotated[
            str | None,
            typer.Argument(help=REPORT_NAME_HELP),
        ] = None,
        config: ConfigOpt = None,
        data_dir: DataDirOpt = None,
        cluster: ClusterOpt = None,
        vc: Annotated[
            str | None, typer.Option("--vc", help="One VC; '(all)' is every VC together.")
        ] = None,
        model: Annotated[
            str | None,
            typer.Option(
                "--model",
                help="One GPU model (of the job: 'mixed' when its GPUs are of several, "
                "'(unknown)' when none is named), or 'each' for every model beside '(all)'. "
                "Default: every model together.",
            ),
        ] = None,
        by: Annotated[
            str | None,
            typer.Option(
                "--by",
                help="user, vc (account) or model (GPU model): GPU hours allocated, busy, "
                "idle-slot, never-used and lost per user, VC or GPU model, most lost first.",
            ),
        ] = None,
        since: Annotated[
            str | None,
            typer.Option(
                help="24h, 7d, 30d (before now) or a date/time. With --by: jobs whose GPU time "
                "overlaps the period, counted for the part inside it; otherwise: jobs started "
                "since then."
            ),
        ] = None,
        fmt: FormatOpt = OutputFormat.table,
    ) -> None:
        """Print a summary as the study prints it (terminal table), or as CSV / JSON."""
        from datetime import UTC, datetime

        from gpuwaste.analyses.period import since_time

        s = settings(config, data_dir)
        now = datetime.now(UTC)
        start = since_time(since, now)
        if by is not None:
            from gpuwaste.analyses.report import jobs_line
            from gpuwaste.analyses.waste_by import BY_WORDS, JOBS, TITLE, waste_by

            if name is not None:
                raise UsageError(
                    f"--by {by} makes its own table: give either a report NAME or --by."
                )
            if model is not None:
                raise UsageError(
                    "--model applies to a report NAME; --by model splits the list by model."
                )
            df = waste_by(s, by, cluster=cluster, vc=vc, since=start, until=now if start else None)
            notes = []  # for people: CSV and JSON are the frame alone
            if fmt == OutputFormat.table and df.height > 0:
                notes.append(jobs_line(s, JOBS, cluster=cluster, vc=vc, period=start is not None))
            render(
                df,
                fmt,
                title=TITLE.format(by=BY_WORDS[by]),
                rollups=ROLLUP_COLUMNS,
                key=("cluster", by),
                notes=notes,
            )
        else:
            from gpuwaste.analyses.caveats import table_caveats
            from gpuwaste.analyses.report import FRESHNESS, TITLES, jobs_line
            from gpuwaste.analyses.report import report as build_report
            from gpuwaste.warehouse.schema import table

            name = name or SUMMARY_TABLES[0]
            df = build_report(s, name, cluster=cluster, vc=vc, since=start, model=model)
            words = BY_NAME[name].jobs if name in BY_NAME else ""  # tables with a jobs column
            notes = []
            if fmt == OutputFormat.table:
                if words and df.height > 0:
                    notes.append(jobs_line(s, words, cluster=cluster, vc=vc, since=start))
                # what the table cannot tell (no quotas, no logs); CSV and JSON are the frame alone
                notes.extend(table_caveats(s.data_dir, df))
                if name in BY_NAME and BY_NAME[name].most_first:
                    df, left_out = most_first(df, BY_NAME[name].most_first)
                    notes[:0] = left_out
            render(
                df,
                fmt,
                title=TITLES.get(name, name),
                rollups=ROLLUP_COLUMNS,
                key=None if name == FRESHNESS else ("cluster", *table(name).key),
                notes=notes,
            )
            if name == FRESHNESS:
                return
        # a period up to now (`--since`) speaks of now: say when its data are late
        print_freshness(s.data_dir, cluster, s.exporter.update_interval_s if start else None)
