"""`gpuwaste ingest logs`: a folder of job stdout/stderr files -> job_logs (failure signatures).

With `--dir` (and `--cluster NAME`) it runs one-off, without a configuration file; without it,
the configured `[clusters.logs]` of `--cluster NAME`, or of every cluster that has one.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuwaste.cli_common import ConfigOpt, DataDirOpt, QuietOpt
from gpuwaste.ingest.cli_options import ClusterName, common, run_subcommand

if TYPE_CHECKING:
    from gpuwaste.ingest.base import Source


def register(app: typer.Typer, source: Source) -> None:
    """Add `logs` to the `ingest` app."""

    @app.command(source.name)
    def logs_cmd(
        ctx: typer.Context,
        dir: Annotated[
            Path | None,
            typer.Option("--dir", help="Folder of job stdout/stderr files (read recursively)."),
        ] = None,
        pattern: Annotated[
            str | None,
            typer.Option(
                "--pattern",
                help="Regex from a file name to its job: group `job`, optional `attempt` "
                "(default: Slurm's slurm-<jobid>.out and slurm-<arrayjob>_<task>.out, .err; "
                "a .gz log's name is matched without .gz).",
            ),
        ] = None,
        tail_mib: Annotated[
            float | None,
            typer.Option(
                "--tail-mib",
                help="Read a larger file (a .gz once decompressed) from its last MiB only (4).",
            ),
        ] = None,
        cluster: ClusterName = None,
        config: ConfigOpt = None,
        data_dir: DataDirOpt = None,
        quiet: QuietOpt = False,
    ) -> None:
        """Job stdout/stderr logs -> the failure signature of each attempt."""
        s, options = common(ctx, config, data_dir, quiet)
        inputs: dict[str, Any] | None = None
        if dir is not None:
            inputs = {"dir": dir}
            if pattern is not None:
                inputs["pattern"] = pattern
            if tail_mib is not None:
                inputs["tail_mib"] = tail_mib
        run_subcommand(s, options, source, cluster, inputs, what="ingest logs --dir")
