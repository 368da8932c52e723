"""`gpuwaste dashboard`."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the dashboard command to the main app."""
