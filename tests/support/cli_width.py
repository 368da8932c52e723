"""The gpuwaste CLI run in-process at a given terminal width, as the table tests read it."""

from __future__ import annotations

from click.testing import Result
from typer.testing import CliRunner

from gpuwaste.cli import app


def invoke(*args: str, width: int) -> Result:
    """`gpuwaste ARGS` with COLUMNS=`width` and no colour; it must exit 0."""
    res = CliRunner().invoke(app, list(args), env={"COLUMNS": str(width), "NO_COLOR": "1"})
    assert res.exit_code == 0, (args, res.output, res.exception)
    return res
