"""A refused flag value is one sentence naming the flag, the value and what it accepts; the
command exits 2 (click's status for a usage error, whoever refuses the value) and writes
nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpuwaste.generate.cli import generate_command

EXE = Path(sys.executable).parent / "gpuwaste"
ZONE = "expected an IANA time zone such as UTC or Europe/Paris"
NAME = "expected letters, digits, '_', '.' or '-', starting with a letter or a digit"


def gpuwaste(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(EXE), *args], capture_output=True, text=True, timeout=120, cwd=cwd)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("gen")
    generate_command(out, seed=3, gpus=8, days=0.05)
    return out


SACCT = ["slurm", "--file", "{in}/sacct.txt"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            [*SACCT, "--cluster", "gen", "--timezone", "Mars/Olympus"],
            f"--timezone 'Mars/Olympus' is not accepted: {ZONE}.",
        ),
        ([*SACCT, "--cluster", "../etc"], f"--cluster '../etc' is not accepted: {NAME}."),
        (
            [*SACCT, "--cluster", "gen", "--vc-from", "qos"],
            "--vc-from 'qos' is not accepted: it must be 'partition' or 'account'.",
        ),
        (
            ["prometheus", "--url", "ftp://prom:9090", "--cluster", "gen"],
            "--url 'ftp://prom:9090' is not accepted: expected an http:// or https:// URL.",
        ),
        (
            [
                "prometheus",
                "--url",
                "http://127.0.0.1:9",
                "--cluster",
                "gen",
                *["--scrape-interval", "0"],
            ],
            "--scrape-interval 0.0 is not accepted: it must be greater than 0.",
        ),
        (
            ["philly", "{in}/philly", "--cluster", "gen", "--timezone", "Mars/Olympus"],
            f"--timezone 'Mars/Olympus' is not accepted: {ZONE}.",
        ),
        (
            ["openmetrics", "--file", "{in}/metrics.om", "--cluster", ".hidden"],
            f"--cluster '.hidden' is not accepted: {NAME}.",
        ),
    ],
    ids=["timezone", "cluster", "vc-from", "url", "scrape-interval", "philly-tz", "dot-cluster"],
)
def test_a_refused_ingest_flag_is_named_with_its_value(
    inputs: Path, tmp_path: Path, args: list[str], expected: str
) -> None:
    data_dir = tmp_path / "wh"
    argv = [a.replace("{in}", str(inputs)) for a in args]
    run = gpuwaste("ingest", "--data-dir", str(data_dir), *argv, cwd=tmp_path)
    assert run.returncode == 2, (run.stdout, run.stderr)
    assert run.stderr == f"gpuwaste: {expected}\n"
    assert not data_dir.exists()  # refused before anything was written


def test_a_good_vc_from_still_decides_the_vc(inputs: Path, tmp_path: Path) -> None:
    sacct = str(inputs / "sacct.txt")
    for vc_from in ("partition", "account"):
        data_dir = tmp_path / vc_from
        args = ["slurm", "--file", sacct, "--cluster", "gen", "--vc-from", vc_from]
        run = gpuwaste("ingest", "--data-dir", str(data_dir), *args, cwd=tmp_path)
        assert run.returncode == 0, run.stderr
    vcs = {
        vc_from: gpuwaste(
            "sql",
            "--data-dir",
            str(tmp_path / vc_from),
            "--format",
            "csv",
            "select distinct vc from jobs order by vc",
            cwd=tmp_path,
        ).stdout.split()[1:]
        for vc_from in ("partition", "account")
    }
    assert vcs["partition"] and vcs["account"] and vcs["partition"] != vcs["account"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["--start", "garbage"],
            "--start 'garbage' is not accepted: expected an ISO 8601 time such as "
            "2026-10-31T12:00Z.",
        ),
        (["--gpus", "0"], "--gpus 0 is not accepted: it must be a finite number greater than 0."),
        (
            ["--days", "-1"],
            "--days -1.0 is not accepted: it must be a finite number greater than 0.",
        ),
        (["--cluster", "../x"], f"--cluster '../x' is not accepted: {NAME}."),
    ],
)
def test_generate_refuses_bad_flags_in_one_line(
    tmp_path: Path, args: list[str], expected: str
) -> None:
    out = tmp_path / "gen"
    run = gpuwaste("generate", "--out", str(out), *args, cwd=tmp_path)
    assert run.returncode == 2
    assert run.stderr == f"gpuwaste: {expected}\n"
    assert not out.exists()


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("exporter", "it must be a TCP port, 1-65535 (or 0 for any free port)."),
        ("dashboard", "it must be a TCP port, 1-65535."),
    ],
)
def test_a_port_out_of_range_is_a_usage_error(tmp_path: Path, command: str, expected: str) -> None:
    """Like every other refused flag value: exit 2 (a usage error), one line naming the flag."""
    run = gpuwaste(command, "--data-dir", str(tmp_path / "wh"), "--port", "99999", cwd=tmp_path)
    assert run.returncode == 2, (run.stdout, run.stderr)
    assert run.stderr == f"gpuwaste: --port 99999 is not accepted: {expected}\n"
