"""`gpuwaste analyze` and `gpuwaste report`."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the analyses' commands to the main app."""
