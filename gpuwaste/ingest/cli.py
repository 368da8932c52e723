"""`gpuwaste ingest [SOURCE...]`: each source is a subcommand; with none, every configured one.

A subcommand given its input flags (`--url`, `--file`, a folder) runs one-off without a
configuration file; given none, it runs that source for `--cluster NAME`, or for every cluster
that configures it (`ingest.run`). Subcommands chain: `gpuwaste ingest prometheus slurm`. The
subcommands are those of `ingest.sources.SOURCES`, added here.
"""

from __future__ import annotations

import typer

from gpuwaste.cli_common import ConfigOpt, DataDirOpt, QuietOpt, settings
from gpuwaste.ingest.base import RunOptions
from gpuwaste.ingest.sources import SOURCES

ingest_app = typer.Typer(
    help="Pull new data since the last watermark into the warehouse (the scheduled job). A "
    "SOURCE given its input flags ingests them one-off into --cluster NAME; without them, it runs "
    "its configured source for --cluster NAME only, or for every cluster that has one.",
    invoke_without_command=True,
    chain=True,
    rich_markup_mode=None,  # plain help (gpuwaste/cli.py says why)
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
        from gpuwaste.ingest.run import run_configured  # not at start-up (tests/test_cli_startup)

        run_configured(settings(config, data_dir), SOURCES, RunOptions(quiet=quiet))


for _source in SOURCES:
    _source.register_cli(ingest_app, _source)
