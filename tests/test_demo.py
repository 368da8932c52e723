"""The whole path on the bundled sample, as a new user runs it (`gpuwaste demo --no-serve`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent


def run(*args: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("demo") / "wh"
    out = run(str(BIN / "gpuwaste"), "demo", "--no-serve", "--data-dir", str(d))
    assert out.returncode == 0, out.stderr[-3000:]
    assert "GPU hours allocated" in out.stdout
    return d


def test_demo_warehouse_answers_gpuwaste_sql(demo_dir: Path) -> None:
    out = run(
        str(BIN / "gpuwaste"),
        "sql",
        "--data-dir",
        str(demo_dir),
        "--format",
        "csv",
        "select count(*) as n from gpu_samples",
    )
    assert out.returncode == 0, out.stderr
    n = int(out.stdout.split()[1])
    assert n > 100_000


def test_demo_warehouse_answers_standalone_duckdb(demo_dir: Path) -> None:
    out = run(
        str(BIN / "duckdb"),
        "-readonly",
        "-csv",
        str(demo_dir / "gpuwaste.duckdb"),
        "-c",
        "select count(*) as n from gpu_samples; select count(*) as n from job_usage",
    )
    assert out.returncode == 0, out.stderr
    values = [int(v) for v in out.stdout.split() if v.isdigit()]
    assert len(values) == 2 and values[0] > 100_000 and values[1] > 10


def test_demo_twice_changes_nothing(demo_dir: Path) -> None:
    q = "select (select count(*) from gpu_samples), (select count(*) from jobs), (select count(*) from job_usage), (select count(*) from quarantine)"
    before = run(
        str(BIN / "gpuwaste"), "sql", "--data-dir", str(demo_dir), "--format", "csv", q
    ).stdout
    out = run(str(BIN / "gpuwaste"), "demo", "--no-serve", "--data-dir", str(demo_dir))
    assert out.returncode == 0, out.stderr[-3000:]
    after = run(
        str(BIN / "gpuwaste"), "sql", "--data-dir", str(demo_dir), "--format", "csv", q
    ).stdout
    assert before == after
