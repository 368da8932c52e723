"""`gpuwaste ingest slurm | philly | csv | parquet`: scheduler records, the Philly trace, exports.

Given its input flags a subcommand runs one-off for `--cluster NAME` (no configuration needed);
given none, it runs that source for every cluster that configures it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from gpuwaste.cli_common import ConfigOpt, DataDirOpt, QuietOpt
from gpuwaste.config import CsvSource
from gpuwaste.errors import GpuwasteError
from gpuwaste.ingest.cli_options import ClusterName, common, one_off_cluster
from gpuwaste.ingest.run import run_configured, run_one

TimezoneOpt = Annotated[
    str | None,
    typer.Option("--timezone", help="Time zone of times without one (default: UTC, or config)."),
]


def register(app: typer.Typer) -> None:
    """Add this family's subcommands to the `ingest` app."""

    @app.command("slurm")
    def slurm_cmd(
        ctx: typer.Context,
        file: Annotated[
            Path | None, typer.Option("--file", help="sacct --parsable2 output to read.")
        ] = None,
        scontrol: Annotated[
            Path | None,
            typer.Option("--scontrol", help="`scontrol show job -d` output: GPU indices per node."),
        ] = None,
        columns: Annotated[
            str | None,
            typer.Option("--columns", help="Comma-separated columns of output without a header."),
        ] = None,
        vc_from: Annotated[
            str, typer.Option("--vc-from", help="Virtual cluster from 'account' or 'partition'.")
        ] = "account",
        cluster: ClusterName = None,
        timezone: TimezoneOpt = None,
        config: ConfigOpt = None,
        data_dir: DataDirOpt = None,
        quiet: QuietOpt = False,
    ) -> None:
        """Slurm accounting (sacct) -> jobs and job_gpus."""
        s, q = common(ctx, config, data_dir, quiet)
        if file is None:
            run_configured(s, ["slurm"], q)
            return
        src = {
            "file": file,
            "scontrol_file": scontrol,
            "columns": [c.strip() for c in columns.split(",")] if columns else None,
            "vc_from": vc_from,
        }
        run_one(
            s,
            one_off_cluster(s, cluster, "ingest slurm --file", timezone=timezone, slurm=src),
            "slurm",
            q,
        )

    @app.command("philly")
    def philly_cmd(
        ctx: typer.Context,
        folder: Annotated[
            Path | None, typer.Argument(help="Unpacked Philly trace folder (cluster_job_log, ...).")
        ] = None,
        cluster: ClusterName = None,
        timezone: Annotated[
            str, typer.Option("--timezone", help="Zone of the job log's times.")
        ] = "America/Los_Angeles",
        config: ConfigOpt = None,
        data_dir: DataDirOpt = None,
        quiet: QuietOpt = False,
    ) -> None:
        """The Microsoft Philly trace -> jobs, job_gpus, gpu_samples, host_samples."""
        s, q = common(ctx, config, data_dir, quiet)
        if folder is None:
            run_configured(s, ["philly"], q)
            return
        src = {"dir": folder, "timezone": timezone}
        run_one(s, one_off_cluster(s, cluster, "ingest philly DIR", philly=src), "philly", q)

    def _tabular(kind: str) -> None:
        @app.command(kind)
        def tabular_cmd(
            ctx: typer.Context,
            samples: Annotated[
                Path | None, typer.Option("--samples", help="Long-format GPU samples file.")
            ] = None,
            jobs: Annotated[Path | None, typer.Option("--jobs", help="Jobs table file.")] = None,
            mapping: Annotated[
                Path | None,
                typer.Option("--mapping", help="TOML column mapping (docs/ingest-files.md)."),
            ] = None,
            cluster: ClusterName = None,
            config: ConfigOpt = None,
            data_dir: DataDirOpt = None,
            quiet: QuietOpt = False,
        ) -> None:
            s, q = common(ctx, config, data_dir, quiet)
            if samples is None and jobs is None:
                run_configured(s, [kind], q)
                return
            if mapping is None:
                raise GpuwasteError(f"ingest {kind} needs --mapping M.toml to name the columns.")
            sources: dict[str, Any] = {kind: CsvSource(samples=samples, jobs=jobs, mapping=mapping)}
            run_one(s, one_off_cluster(s, cluster, f"ingest {kind}", **sources), kind, q)

        tabular_cmd.__doc__ = f"Generic {kind} exports with a column mapping -> samples and jobs."

    _tabular("csv")
    _tabular("parquet")
