"""Every `gpuwaste ingest SOURCE` subcommand behaves alike, through the real command line.

- Without input flags, `--cluster NAME` runs that configured cluster only; without `--cluster`,
  every configured cluster that has the source. A cluster that lacks the source is one error line.
- `--quiet`: no progress display, the one summary line per source on stderr, nothing on stdout;
  without it, a terminal shows progress while a source runs (checked in a real pseudo-terminal).
"""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest
from harness.prometheus import Synthetic, write_synthetic_openmetrics

from gpuwaste.warehouse.store import Warehouse

DATA = Path(__file__).parent / "data"
SACCT = DATA / "sacct" / "berlin_quirks_parsable2.txt"
PHILLY = DATA / "philly"
TABULAR = DATA / "tabular"
EXE = Path(sys.executable).with_name("gpuwaste")
# source -> the table whose rows show that the source ran for a cluster
WRITES = {"slurm": "jobs", "philly": "jobs", "csv": "jobs", "openmetrics": "gpu_samples"}


def gpuwaste(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(EXE), *args], capture_output=True, text=True, timeout=300, check=False
    )


def source_tables(om: Path) -> str:
    """The TOML tables of one cluster configuring every file source."""
    return f"""
[clusters.openmetrics]
file = "{om}"
[clusters.slurm]
file = "{SACCT}"
[clusters.philly]
dir = "{PHILLY}"
[clusters.csv]
samples = "{TABULAR / "samples.csv"}"
jobs = "{TABULAR / "jobs.csv"}"
mapping = "{TABULAR / "mapping.toml"}"
"""


@pytest.fixture
def config(tmp_path: Path) -> Path:
    """Clusters `a` and `b` with every file source; `bare` with none."""
    om = tmp_path / "metrics.om"
    write_synthetic_openmetrics(Synthetic(points=20, node=False), om)
    text = f'data_dir = "{tmp_path / "wh"}"\n'
    for name in ("a", "b"):
        text += f'\n[[clusters]]\nname = "{name}"\n' + source_tables(om)
    text += '\n[[clusters]]\nname = "bare"\n'
    path = tmp_path / "gpuwaste.toml"
    path.write_text(text)
    return path


def clusters_written(config: Path, table: str) -> set[str]:
    wh = Warehouse(config.parent / "wh")
    return {c for c in ("a", "b", "bare") if wh.read(table, c).height}


@pytest.mark.parametrize("source", sorted(WRITES))
def test_cluster_flag_selects_one_configured_cluster(config: Path, source: str) -> None:
    done = gpuwaste("ingest", "--config", str(config), source, "--cluster", "b")
    assert done.returncode == 0, done.stderr
    assert clusters_written(config, WRITES[source]) == {"b"}
    assert done.stdout.startswith(f"b/{source}: ") and f"a/{source}" not in done.stdout


@pytest.mark.parametrize("source", sorted(WRITES))
def test_without_cluster_flag_every_cluster_having_the_source(config: Path, source: str) -> None:
    done = gpuwaste("ingest", "--config", str(config), source)
    assert done.returncode == 0, done.stderr
    assert clusters_written(config, WRITES[source]) == {"a", "b"}


@pytest.mark.parametrize("source", sorted(WRITES))
def test_a_cluster_without_the_source_is_one_error_line(config: Path, source: str) -> None:
    done = gpuwaste("ingest", "--config", str(config), source, "--cluster", "bare")
    assert done.returncode == 1
    assert done.stderr == (
        f"gpuwaste: cluster bare has no [{source}] source configured (in {config}).\n"
    )
    assert not clusters_written(config, WRITES[source])


@pytest.mark.parametrize("source", sorted(WRITES))
def test_quiet_leaves_one_summary_line_on_stderr(config: Path, source: str) -> None:
    done = gpuwaste("ingest", "--config", str(config), "--quiet", source, "--cluster", "a")
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"a/{source}: "), done.stderr


def on_a_terminal(*args: str) -> str:
    """Everything the command writes to a pseudo-terminal (stdout and stderr both)."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: the real command, its output on the terminal
        os.execv(str(EXE), [str(EXE), *args])
    out = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # the terminal closed: the command ended
            break
        if not chunk:
            break
        out += chunk
    os.waitpid(pid, 0)
    os.close(fd)
    return out.decode("utf-8", errors="replace")


@pytest.mark.parametrize("source", sorted(WRITES))
def test_a_terminal_shows_progress_unless_quiet(config: Path, source: str) -> None:
    shown = on_a_terminal("ingest", "--config", str(config), source, "--cluster", "a")
    assert f"a {source}" in shown  # the progress display: cluster and source, while it runs
    assert f"a/{source}: " in shown  # then the summary line
    quiet = on_a_terminal("ingest", "--config", str(config), "--quiet", source, "--cluster", "a")
    assert f"a {source}" not in quiet
    assert quiet.strip().startswith(f"a/{source}: ") and len(quiet.strip().splitlines()) == 1
