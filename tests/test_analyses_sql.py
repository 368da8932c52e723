"""The SQL reads on its own: every file states its grain and sources first and ends with
`select * from final`; every registered analysis has its SQL file, and declares the inputs its
header names, or is made by a step of the per-job pass; every SQL file under gpuwaste/sql/ is
run; the test oracles (tests/oracles/) say that they are."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpuwaste.act.policy.replay import SQL_FILES as POLICY_SQL
from gpuwaste.analyses.per_job import BATCH_STEPS, RESULT_OF
from gpuwaste.analyses.plan import SQL_FILES as PLAN_SQL
from gpuwaste.analyses.registry import ANALYSES
from gpuwaste.warehouse.mig import SLICE_WEIGHT_MACRO
from gpuwaste.warehouse.schema import all_tables

REPO = Path(__file__).resolve().parent.parent
SQL = REPO / "gpuwaste" / "sql"
SQL_FILES = sorted(SQL.glob("*/*.sql"))
ORACLES = sorted((REPO / "tests" / "oracles").glob("*.sql"))


@pytest.mark.parametrize("path", SQL_FILES + ORACLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_sql_file_shape(path: Path) -> None:
    text = path.read_text()
    lines = text.splitlines()
    assert lines[0].startswith("-- grain: "), path
    assert any(line.startswith("-- sources: ") for line in lines[:8]), path
    assert text.rstrip().endswith("select * from final"), path
    code = "\n".join(line for line in lines if not line.lstrip().startswith("--"))
    for keyword in ("SELECT ", "FROM ", "WHERE ", "GROUP BY ", " JOIN "):
        assert keyword not in code, f"{path}: upper-case {keyword.strip()}"


MACROS = re.findall(r"macro (\w+)\(", SLICE_WEIGHT_MACRO)  # analyses/sqlfiles.define_macros


@pytest.mark.parametrize("path", SQL_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_sql_file_names_the_macros_it_calls(path: Path) -> None:
    lines = path.read_text().splitlines()
    header = next((line for line in lines if line.startswith("-- macros: ")), "")
    code = "\n".join(line for line in lines if not line.lstrip().startswith("--"))
    for macro in MACROS:
        assert (f"{macro}(" in code) == (macro in header), f"{path}: {macro}"


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
    # by polars, numpy or compiled steps
    made_by_steps = {
        RESULT_OF[s.output] for s in BATCH_STEPS if not s.sql and s.output in RESULT_OF
    }
    for a in ANALYSES:
        if a.kind == "per_job" and a.name in made_by_steps:
            assert not (SQL / f"{a.sql_file}.sql").exists(), f"{a.name}: a second definition"
            continue
        assert (SQL / f"{a.sql_file}.sql").is_file(), a.name
        assert set(a.inputs) <= _sources(a.sql_file), a.name
        if a.kind == "summary":  # a summary reads warehouse tables only, each one declared
            assert _sources(a.sql_file) & set(all_tables()) == set(a.inputs), a.name


def test_every_sql_step_declares_what_it_reads() -> None:
    for step in BATCH_STEPS:
        if step.sql:
            assert set(step.inputs) <= _sources(step.sql), step.output


def test_every_sql_file_is_run_and_every_oracle_says_it_is_one() -> None:
    run = {a.sql_file for a in ANALYSES if a.kind != "per_job"}  # summaries, cluster rows
    run |= {s.sql for s in BATCH_STEPS if s.sql}
    run |= {"staging/alloc_intervals", "staging/allocations", "staging/host_newest"}
    run |= {"staging/resolve_unknown_gpus"}
    run |= {f"staging/{s}" for a in ANALYSES for s in a.staging}  # views the summaries read
    run |= {"reports/waste_by", "reports/waited_by"}  # report --by; waited_by: notify too
    run |= set(POLICY_SQL)  # gpuwaste policy replay
    run |= set(PLAN_SQL)  # gpuwaste analyze: the jobs to recompute and their batches
    run |= {"exporter/window_hours", "exporter/gpu_seconds"}  # gpuwaste exporter
    run |= {"act/digest_jobs"}  # gpuwaste notify
    for path in SQL_FILES:
        assert f"{path.parent.name}/{path.stem}" in run, path
    for path in ORACLES:
        header = path.read_text().split("\nwith", 1)[0]
        assert "TEST ORACLE, not product code" in header, path
        # it names the test that compares it with the product code, which reads it
        tests = re.findall(r"tests/(test_\w+\.py)", header)
        assert tests, path
        assert all(path.stem in (REPO / "tests" / t).read_text() for t in tests), path
