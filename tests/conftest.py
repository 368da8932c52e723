"""Shared fixtures: a fresh warehouse folder per test; the demo warehouse, built once."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
SAMPLE_DATA = REPO / "sample_data"


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    d = tmp_path / "warehouse"
    d.mkdir()
    return d


@pytest.fixture(scope="session")
def demo_warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`gpuwaste demo --no-serve` (bundled sample, real ingest and analyze) once per session: it
    takes seconds, and the tests on it only read it, except tests/test_demo.py's re-run of the
    demo, which must change nothing (that test checks it)."""
    from harness.result_warehouse import build_demo_warehouse

    return build_demo_warehouse(tmp_path_factory.mktemp("demo") / "data")
