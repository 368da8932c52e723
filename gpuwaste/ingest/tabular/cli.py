"""`gpuwaste ingest csv | parquet`: generic exports with a column mapping -> samples and jobs.

With `--samples` and/or `--jobs` (and `--mapping`, `--cluster NAME`) a subcommand runs one-off,
without a configuration file; with neither it runs the configured source of `--cluster NAME`, or
of every cluster that has one.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuwaste.cli_common import ConfigOpt, DataDirOpt, QuietOpt
from gpuwaste.errors import GpuwasteError
from gpuwaste.ingest.cli_options import ClusterName, common, run_subcommand

if TYPE_CHECKING:
    from gpuwaste.ingest.base import Source


def register(app: typer.Typer, source: Source) -> None:
    """Add `csv` or `parquet` (the name of `source`) to the `ingest` app."""
    kind = source.name

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
        s, options = common(ctx, config, data_dir, quiet)
        inputs: dict[str, Any] | None = None
        if samples is not None or jobs is not None:
            if mapping is None:
                raise GpuwasteError(f"ingest {kind} needs --mapping M.toml to name the columns.")
            inputs = {"samples": samples, "jobs": jobs, "mapping": mapping}
        run_subcommand(s, options, source, cluster, inputs, what=f"ingest {kind}")

    tabular_cmd.__doc__ = f"Generic {kind} exports with a column mapping -> samples and jobs."
