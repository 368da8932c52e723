"""`gpuwaste analyze` and `gpuwaste report`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from gpuwaste.cli_common import ClusterOpt, ConfigOpt, DataDirOpt, FormatOpt, QuietOpt, settings
from gpuwaste.render import OutputFormat, render


def print_why_no_gpu_time(data_dir: Path, clusters: list[str]) -> None:
    """For each cluster whose jobs can give no GPU time, say why (stderr: a warning)."""
    from gpuwaste.warehouse.diagnose import why_no_gpu_time
    from gpuwaste.warehouse.store import Warehouse

    for cluster in clusters:
        why = why_no_gpu_time(Warehouse(data_dir), cluster)
        if why is not None:
            print(f"gpuwaste: {why}", file=sys.stderr)


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
        quiet: QuietOpt = False,
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
            quiet=quiet,
        )
        print_why_no_gpu_time(s.data_dir, [run.cluster for run in runs])

    @app.command()
    def report(
        name: Annotated[
            str,
            typer.Argument(
                help="waste_by_vc, never_used_by_size, stable_phase_grid, spatial_summary, "
                "debug_jobs, util_by_size_status, util_minute_hist, util_by_spread, "
                "jobs_by_status, queueing_delay, or a per-job table (job_usage, ...)."
            ),
        ] = "waste_by_vc",
        config: ConfigOpt = None,
        data_dir: DataDirOpt = None,
        cluster: ClusterOpt = None,
        vc: Annotated[
            str | None, typer.Option("--vc", help="One VC; '(all)' is every VC together.")
        ] = None,
        since: Annotated[
            str | None, typer.Option(help="Only jobs started on or after this day (YYYY-MM-DD).")
        ] = None,
        fmt: FormatOpt = OutputFormat.table,
    ) -> None:
        """Print a summary as the study prints it (terminal table), or as CSV / JSON."""
        from gpuwaste.analyses.report import TITLES
        from gpuwaste.analyses.report import report as build_report
        from gpuwaste.analyses.run import since_date

        s = settings(config, data_dir)
        df = build_report(s, name, cluster=cluster, vc=vc, since=since_date(since))
        render(df, fmt, title=TITLES.get(name, name))
