"""`gpuwaste ingest slurm`: Slurm accounting (sacct) -> jobs and job_gpus.

With `--file` (and `--cluster NAME`) it runs one-off, without a configuration file; without
`--file` it runs the configured Slurm source of `--cluster NAME`, or of every cluster that has
one.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpuwaste.cli_common import ConfigOpt, DataDirOpt, QuietOpt
from gpuwaste.ingest.cli_options import ClusterName, common, run_subcommand

if TYPE_CHECKING:
    from gpuwaste.ingest.base import Source

TimezoneOpt = Annotated[
    str | None,
    typer.Option("--timezone", help="Time zone of times without one (default: UTC, or config)."),
]


def register(app: typer.Typer, source: Source) -> None:
    """Add `slurm` to the `ingest` app."""

    @app.command(source.name)
    def slurm_cmd(
        ctx: typer.Context,
        file: Annotated[
            Path | None, typer.Option("--file", help="sacct --parsable2 output to read.")
        ] = None,
        scontrol: Annotated[
            Path | None,
            typer.Option(
                "--scontrol",
                help="`scontrol show job -d` output, or a folder of such captures: GPU indices "
                "(IDX) per node.",
            ),
        ] = None,
        gres_idx: Annotated[
            str,
            typer.Option(
                "--gres-idx",
                help="What scontrol's IDX is where the telemetry names no minor number: "
                "'minor' (wait for one) or 'index' (the NVML index).",
            ),
        ] = "minor",
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
        s, options = common(ctx, config, data_dir, quiet)
        inputs = None
        if file is not None:
            inputs = {
                "file": file,
                "scontrol_file": scontrol,
                "columns": [c.strip() for c in columns.split(",")] if columns else None,
                "vc_from": vc_from,
                "gres_idx": gres_idx,
            }
        what = "ingest slurm --file"
        run_subcommand(s, options, source, cluster, inputs, what=what, timezone=timezone)
