"""Every command's `--help`: flags (booleans) are shown without a value type; every bracketed
text of a help (a configuration section's name) is shown; demo's --data-dir help says what the
demo does."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from subprocess import CompletedProcess
from typing import Any

import typer
from typer.core import TyperGroup
from typer.testing import CliRunner

from gpuwaste.cli import app
from gpuwaste.generate.cli import generate_command


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


def gpuwaste(*args: str, env: dict[str, str], cwd: Path | None = None) -> CompletedProcess[str]:
    """The installed `gpuwaste` command, run for real."""
    exe = Path(sys.executable).parent / "gpuwaste"
    return subprocess.run(
        [str(exe), *args], capture_output=True, text=True, timeout=300, env=env, cwd=cwd
    )


def test_the_installed_command_shows_flags_bare() -> None:
    shown = gpuwaste("analyze", "--help", env={**os.environ, "COLUMNS": "200"})
    assert shown.returncode == 0, shown.stderr
    options = [line.split() for line in shown.stdout.splitlines()]
    lines = {words[0]: " ".join(words) for words in options if words and words[0][:2] == "--"}
    assert "<bool>" not in lines["--quiet"] and "<bool>" not in lines["--rebuild"]
    assert "<int" in lines["--batch-days"]


def test_demo_help_says_the_configured_warehouse_is_not_used() -> None:
    shown = CliRunner().invoke(app, ["demo", "--help"], env={"COLUMNS": "300"}, color=False)
    text = " ".join(shown.output.split())
    assert "from the config" not in text
    assert "reads neither the configuration nor $GPUWASTE_DATA_DIR" in text
    assert "[default: gpuwaste-data]" in text


def test_demo_writes_its_own_folder_whatever_is_configured(tmp_path: Path) -> None:
    """A demo on an operator's machine (config and data folder in the environment) keeps the
    sample out of the configured warehouse."""
    sample = tmp_path / "sample"
    generate_command(sample, seed=2, gpus=8, days=0.05)
    (tmp_path / "gpuwaste.toml").write_text(f'data_dir = "{tmp_path / "configured"}"\n')
    env = {
        **os.environ,
        "GPUWASTE_CONFIG": str(tmp_path / "gpuwaste.toml"),
        "GPUWASTE_DATA_DIR": str(tmp_path / "from-env"),
        "GPUWASTE_SAMPLE_DIR": str(sample),
    }
    done = gpuwaste("demo", "--no-serve", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "gpuwaste-data" / "gpuwaste.duckdb").is_file()
    assert not (tmp_path / "configured").exists() and not (tmp_path / "from-env").exists()


def _bracketed(text: str | None) -> list[str]:
    return re.findall(r"\[[^\[\]]*\]", text or "")


def test_every_bracketed_text_of_a_help_is_shown() -> None:
    """`[notify] since`, `[clusters.vc_quotas]`: a help that names a configuration section keeps
    the name in `--help` (Rich markup would take `[...]` for a style tag and drop it)."""
    root = typer.main.get_command(app)
    assert isinstance(root, TyperGroup)
    runner = CliRunner()
    checked = 0
    for path in command_paths(root):
        command: Any = root
        for name in path:
            assert isinstance(command, TyperGroup)
            command = command.commands[name]
        wanted = _bracketed(command.help)
        for param in command.params:
            wanted += _bracketed(getattr(param, "help", None))
        if not wanted:
            continue
        shown = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "200"}, color=False)
        text = " ".join(shown.output.replace("│", " ").split())
        for bracketed in wanted:
            assert " ".join(bracketed.split()) in text, (path, bracketed)
            checked += 1
    assert checked >= 3  # notify's [notify] twice, generate's [clusters.vc_quotas], ...
