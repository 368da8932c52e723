"""Packaging: the licence is PEP 639 metadata, so building gpuwaste prints no setuptools
deprecation warning; `make demo` installs the package alone, `make test` the dev extra."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO


def test_licence_is_an_spdx_expression_with_a_setuptools_that_reads_it() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert project["project"]["license"] == "Apache-2.0"
    [setuptools] = [r for r in project["build-system"]["requires"] if r.startswith("setuptools")]
    minimum = re.fullmatch(r"setuptools>=(\d+)(\.\d+)*", setuptools)
    assert minimum is not None and int(minimum.group(1)) >= 77, setuptools  # PEP 639 support


@pytest.mark.slow
def test_building_the_wheel_prints_no_licence_warning(tmp_path: Path) -> None:
    """A real build, as `pip install` does it (isolated, with the setuptools pyproject asks for)."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(REPO / "gpuwaste", src / "gpuwaste", ignore=shutil.ignore_patterns("*.pyc"))
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "-w", str(tmp_path), str(src)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    output = built.stdout + built.stderr
    assert "SetuptoolsDeprecationWarning" not in output
    assert "project.license" not in output
    [wheel] = tmp_path.glob("gpuwaste-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        metadata = zf.read(next(n for n in zf.namelist() if n.endswith("METADATA"))).decode()
    assert "License-Expression: Apache-2.0" in metadata.splitlines()


def make_plan(target: str, venv: Path) -> list[str]:
    """The commands `make TARGET` would run for a fresh clone (`make -n`, nothing is run)."""
    done = subprocess.run(
        ["make", "-n", "-C", str(REPO), target, f"VENV={venv}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return [line for line in done.stdout.splitlines() if "pip install" in line]


def test_make_demo_installs_the_package_alone_and_make_test_the_dev_extra(tmp_path: Path) -> None:
    """The demo needs the runtime dependencies only: the dev extra (pyspark, mypy, playwright)
    is about 1.9 GB of venv and most of a fresh demo's time."""
    demo = make_plan("demo", tmp_path / "venv")
    assert [line for line in demo if " -e " in line] == [
        f"{tmp_path / 'venv'}/bin/python -m pip install --quiet -e ."
    ], demo
    test = make_plan("test", tmp_path / "venv")
    assert any(line.endswith("-e '.[dev]'") for line in test), test
