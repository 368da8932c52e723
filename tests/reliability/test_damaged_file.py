"""A damaged warehouse file (cut short by a full disk or an interrupted copy) is named in one
sentence by every command that reads it, never a traceback; moved aside as the sentence says,
every other file is read again."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.support.two_jobs import write_two_jobs

GPUWASTE = Path(sys.executable).parent / "gpuwaste"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", str(REPO))}
    return subprocess.run(
        [str(GPUWASTE), *args], capture_output=True, text=True, env=env, timeout=300
    )


@pytest.fixture
def damaged(tmp_path: Path) -> tuple[Path, Path]:
    """An analyzed warehouse of two clusters whose cluster c1's gpu_samples file is cut to its
    first 100 bytes."""
    data = tmp_path / "data"
    write_two_jobs(data, "c1")
    write_two_jobs(data, "c2")
    assert run("analyze", "--data-dir", str(data)).returncode == 0
    (victim,) = (data / "parquet" / "gpu_samples" / "cluster=c1").rglob("*.parquet")
    victim.write_bytes(victim.read_bytes()[:100])
    return data, victim


@pytest.mark.parametrize(
    "command",
    [
        ["sql", "select count(*) from gpu_samples"],
        ["analyze", "--rebuild"],
        ["report"],
    ],
    ids=["sql", "analyze", "report"],
)
def test_every_command_names_the_damaged_file(
    damaged: tuple[Path, Path], command: list[str]
) -> None:
    data, victim = damaged
    done = run(*command, "--data-dir", str(data))
    assert done.returncode != 0
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines and all(str(victim) in line for line in lines), done.stderr
    assert "cannot be read" in lines[-1] and "move it aside" in lines[-1]


def test_moved_aside_every_other_file_is_read(damaged: tuple[Path, Path]) -> None:
    data, victim = damaged
    victim.rename(victim.with_name(victim.name + ".damaged"))
    assert run("analyze", "--data-dir", str(data)).returncode == 0
    query = "select count(*) filter (cluster = 'c1'), count(*) from gpu_samples"
    done = run("sql", query, "--data-dir", str(data), "--format", "csv")
    assert done.returncode == 0, done.stderr
    c1, every = map(int, done.stdout.splitlines()[-1].split(","))
    assert c1 == 0 and every == 160  # c2's 80 samples of 2 GPUs
