"""The SQL reads on its own: every file states its grain and sources first and ends with
`select * from final`; every analysis module has its SQL file; every result table is documented."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuwaste.analyses.per_job import PER_JOB_TABLES
from gpuwaste.analyses.run import SUMMARIES
from gpuwaste.warehouse.schema import RESULT_TABLES

REPO = Path(__file__).resolve().parent.parent
SQL = REPO / "gpuwaste" / "sql"
SQL_FILES = sorted(SQL.glob("*/*.sql"))


@pytest.mark.parametrize("path", SQL_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_sql_file_shape(path: Path) -> None:
    text = path.read_text()
    lines = text.splitlines()
    assert lines[0].startswith("-- grain: "), path
    assert any(line.startswith("-- sources: ") for line in lines[:8]), path
    assert text.rstrip().endswith("select * from final"), path
    code = "\n".join(line for line in lines if not line.lstrip().startswith("--"))
    for keyword in ("SELECT ", "FROM ", "WHERE ", "GROUP BY ", " JOIN "):
        assert keyword not in code, f"{path}: upper-case {keyword.strip()}"


def test_every_analysis_has_its_sql() -> None:
    for name in (*PER_JOB_TABLES, *SUMMARIES):
        assert (SQL / "analyses" / f"{name}.sql").is_file(), name
        assert (REPO / "gpuwaste" / "analyses" / f"{name}.py").is_file(), name


def test_every_result_table_is_documented() -> None:
    doc = (REPO / "docs" / "analyses.md").read_text()
    for name in RESULT_TABLES:
        assert f"`{name}`" in doc, name
