"""`gpuwaste ingest philly`: the Microsoft Philly trace -> jobs, job_gpus, gpu_samples,
host_samples.

Given a trace folder (and `--cluster NAME`) it runs one-off, without a configuration file; without
one it runs the configured Philly source of `--cluster NAME`, or of every cluster that has one.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpuwaste.cli_common import ConfigOpt, DataDirOpt, QuietOpt
from gpuwaste.ingest.cli_options import ClusterName, common, run_subcommand

if TYPE_CHECKING:
    from gpuwaste.ingest.base import Source


def register(app: typer.Typer, source: Source) -> None:
    """Add `philly` to the `ingest` app."""

    @app.command(source.name)
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
        s, options = common(ctx, config, data_dir, quiet)
        inputs = {"dir": folder, "timezone": timezone} if folder is not None else None
        run_subcommand(s, options, source, cluster, inputs, what="ingest philly DIR")
