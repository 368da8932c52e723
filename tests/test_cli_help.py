"""Every command's `--help`: flags (booleans) are shown without a value type."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import typer
from typer.core import TyperGroup
from typer.testing import CliRunner

from gpuwaste.cli import app


def command_paths(group: TyperGroup, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The path of every command and group under `group`, itself included."""
    paths = [prefix]
    for name, sub in sorted(group.commands.items()):
        if isinstance(sub, TyperGroup):
            paths += command_paths(sub, (*prefix, name))
        else:
            paths.append((*prefix, name))
    return paths


def test_no_help_shows_a_value_for_a_flag() -> None:
    root = typer.main.get_command(app)
    assert isinstance(root, TyperGroup)
    paths = command_paths(root)
    assert ("ingest", "slurm") in paths and ("analyze",) in paths and ("demo",) in paths
    runner = CliRunner()
    for path in paths:
        shown = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "200"}, color=False)
        assert shown.exit_code == 0, (path, shown.output)
        assert "--help" in shown.output, path
        assert "<bool>" not in shown.output, (path, shown.output)
        if "--data-dir" in shown.output:  # options that take a value keep their type
            assert "<path>" in shown.output, path


def test_the_installed_command_shows_flags_bare() -> None:
    exe = Path(sys.executable).parent / "gpuwaste"
    shown = subprocess.run(
        [str(exe), "analyze", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert shown.returncode == 0, shown.stderr
    lines = {line.split()[1]: line for line in shown.stdout.splitlines() if " --" in line}
    assert "<bool>" not in lines["--quiet"] and "<bool>" not in lines["--rebuild"]
    assert "<int" in lines["--batch-days"]
