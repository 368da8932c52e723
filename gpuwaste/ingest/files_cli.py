"""`gpuwaste ingest` subcommands of this family of sources."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this family's subcommands to the `ingest` app."""
