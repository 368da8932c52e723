"""The SQL reads on its own: every file states its grain and sources first and ends with
`select * from final`; every registered analysis has its SQL file, and declares the inputs its
header names; the SQL that `gpuwaste analyze` does not run says so."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpuwaste.act.policy.replay import SQL_FILES as POLICY_SQL
from gpuwaste.analyses.per_job import BATCH_STEPS
from gpuwaste.analyses.plan import SQL_FILES as PLAN_SQL
from gpuwaste.analyses.registry import ANALYSES, ORACLES
from gpuwaste.warehouse.schema import all_tables

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


def _sources(sql_file: str) -> set[str]:
    """The words of a SQL file's `-- sources:` header (up to its `-- variables:` line)."""
    lines = (SQL / f"{sql_file}.sql").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("-- sources: "))
    text = []
    for line in lines[start:]:
        if not line.startswith("--") or (text and line.startswith("-- variables:")):
            break
        text.append(line)
    return set(re.findall(r"[a-z_]+", " ".join(text)))


def test_every_analysis_has_its_sql_and_declares_what_it_reads() -> None:
    for a in ANALYSES:
        assert (SQL / f"{a.sql_file}.sql").is_file(), a.name
        assert set(a.inputs) <= _sources(a.sql_file), a.name
        if a.kind == "summary":  # a summary reads warehouse tables only, each one declared
            assert _sources(a.sql_file) & set(all_tables()) == set(a.inputs), a.name


def test_every_sql_step_declares_what_it_reads() -> None:
    for step in BATCH_STEPS:
        if step.sql:
            assert set(step.inputs) <= _sources(step.sql), step.output


def test_every_sql_file_is_run_or_labelled_as_an_oracle() -> None:
    run = {a.sql_file for a in ANALYSES if a.kind == "summary"}
    run |= {s.sql for s in BATCH_STEPS if s.sql}
    run |= {"staging/allocations", "staging/resolve_unknown_gpus", "staging/host_newest"}
    run |= {"reports/waste_by"}
    run |= set(POLICY_SQL)  # gpuwaste policy replay
    run |= set(PLAN_SQL)  # gpuwaste analyze: the jobs to recompute and their batches
    run |= {"exporter/window_hours"}  # gpuwaste exporter
    run |= {"act/digest_jobs"}  # gpuwaste notify
    for path in SQL_FILES:
        name = f"{path.parent.name}/{path.stem}"
        assert (name in run) != (name in ORACLES), name
        if name in ORACLES:
            header = path.read_text().split("\nwith", 1)[0]
            assert "not run by `gpuwaste analyze`" in header, name
            assert "tests/test_job_samples.py" in header, name
