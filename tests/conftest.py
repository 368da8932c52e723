"""Shared fixtures: a fresh warehouse folder per test."""

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
