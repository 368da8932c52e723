"""`gpuwaste ingest [SOURCE...]`: each source is a subcommand; with none, every configured one.

A subcommand given its flags (`--url`, `--file`, a folder) runs one-off without a configuration
file; given none, it runs that source for every cluster that configures it. Subcommands chain:
`gpuwaste ingest prometheus slurm`.
"""

from __future__ import annotations

import typer

from gpuwaste.cli_common import ConfigOpt, DataDirOpt, QuietOpt, settings
from gpuwaste.ingest.run import run_configured

ingest_app = typer.Typer(
    help="Pull new data since the last watermark into the warehouse (the scheduled job).",
    invoke_without_command=True,
    chain=True,
)


@ingest_app.callback()
def ingest_all(
    ctx: typer.Context,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """With no SOURCE: every source configured for every cluster."""
    ctx.obj = {"config": config, "data_dir": data_dir, "quiet": quiet}
    if ctx.invoked_subcommand is None:
        run_configured(settings(config, data_dir), None, quiet)


def _register_subcommands() -> None:
    from gpuwaste.ingest import files_cli, prometheus_cli

    prometheus_cli.register(ingest_app)
    files_cli.register(ingest_app)


_register_subcommands()
