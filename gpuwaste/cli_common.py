"""Options shared by the commands, and how a command's settings are loaded."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpuwaste.config import DEFAULT_DATA_DIR, Settings, load_settings
from gpuwaste.render import OutputFormat

ConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--config", help="gpuwaste.toml to read (default: $GPUWASTE_CONFIG, ./gpuwaste.toml)."
    ),
]
DataDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--data-dir",
        help=f"Warehouse folder (default: from the config, else ./{DEFAULT_DATA_DIR}).",
    ),
]
FormatOpt = Annotated[OutputFormat, typer.Option("--format", help="table (terminal), csv or json.")]
ClusterOpt = Annotated[str | None, typer.Option("--cluster", help="Cluster name.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", help="No progress output (for timers).")]


def settings(config: Path | None, data_dir: Path | None) -> Settings:
    return load_settings(config, data_dir)
