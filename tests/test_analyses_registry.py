"""One registry of analyses, every list derived from it; the warehouse knows every result table
without importing the analyses; each layer imports only the layers docs/architecture.md lets it; the per-job pass and `analyze_cluster` leave nothing behind on
an error."""

from __future__ import annotations

import ast
import subprocess
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from gpuwaste.analyses import run as run_module
from gpuwaste.analyses.per_job import run_batch
from gpuwaste.analyses.registry import (
    AFTER_PER_JOB,
    ANALYSES,
    CLUSTER_ROW_TABLES,
    PER_JOB_TABLES,
    STAGING_TABLES,
    SUMMARY_TABLES,
    Analysis,
    staging_tables,
    summary_order,
)
from gpuwaste.analyses.report import REPORTS, TITLES
from gpuwaste.cli import app
from gpuwaste.config import Settings, Thresholds
from gpuwaste.dashboard import queries
from gpuwaste.warehouse.catalog import connect
from gpuwaste.warehouse.results import RESULT_TABLES
from gpuwaste.warehouse.schema import all_tables
from tests.support.two_jobs import T0, write_two_jobs

REPO = Path(__file__).resolve().parent.parent
NAMES = [a.name for a in ANALYSES]


def test_every_result_table_has_one_analysis() -> None:
    assert sorted(NAMES) == sorted(RESULT_TABLES)
    assert len(set(NAMES)) == len(NAMES)
    assert set(PER_JOB_TABLES) | set(SUMMARY_TABLES) | set(CLUSTER_ROW_TABLES) == set(NAMES)


def test_every_list_of_analyses_is_derived_from_the_registry() -> None:
    """`report --help`, the report's names and titles, analyze's summaries, the dashboard's list
    of result tables, the SQL page's tables and docs/analyses.md name every analysis."""
    shown = CliRunner().invoke(app, ["report", "--help"], env={"COLUMNS": "2000"}, color=False)
    help_text = " ".join(shown.output.split())
    doc = (REPO / "docs" / "analyses.md").read_text()
    for name in NAMES:
        assert name in help_text, name
        assert name in REPORTS and TITLES[name], name
        assert name in queries.RESULT_TABLES, name
        assert name in all_tables(), name  # the SQL page's "Example for table" list
        assert f"`{name}`" in doc, name
    assert list(run_module.SUMMARIES) == [a.name for a in AFTER_PER_JOB]
    assert set(SUMMARY_TABLES) <= set(run_module.SUMMARIES)
    assert sorted(queries.RESULT_TABLES) == sorted(NAMES)


def _summary(name: str, *inputs: str) -> Analysis:
    return Analysis(name, "summary", name, "", inputs, "")


def test_summaries_run_after_the_summaries_they_read() -> None:
    """Declared out of order, `c` reading `b` reading `a`: they run a, b, c; a summary that
    reads none keeps its declared place among the ready ones."""
    declared = (_summary("c", "b"), _summary("b", "a", "job_usage"), _summary("a"), _summary("d"))
    assert [a.name for a in summary_order(declared)] == ["a", "d", "b", "c"]


def test_each_staging_query_is_made_once_for_its_readers_in_their_run_order() -> None:
    """Every staging relation, each with its readers in run order (the first makes it, the
    last drops it), in the order they are first read (one reader's in the order it declares
    them: one may read another); analyze's are those docs/architecture.md names."""
    declared = (
        Analysis("a", "summary", "a", "", (), "", staging=("x", "y")),
        Analysis("b", "summary", "b", "", (), "", staging=("z",)),
        Analysis("c", "summary", "c", "", (), "", staging=("x",)),
    )
    assert staging_tables(declared) == {"x": ("a", "c"), "y": ("a",), "z": ("b",)}
    assert list(staging_tables(declared)) == ["x", "y", "z"]
    assert STAGING_TABLES == {
        "queue_wait_pieces": ("queue_causes", "queue_idle_overlap"),
        "queue_idle_holders": ("queue_idle_overlap",),
        "queue_span_idle": ("queue_idle_overlap",),
        "allocation_days": ("waste_daily", "energy_daily"),
    }


def test_a_fresh_process_importing_only_the_warehouse_knows_every_result_table() -> None:
    code = (
        "import sys\n"
        "from gpuwaste.warehouse.schema import all_tables\n"
        "print(' '.join(sorted(all_tables())))\n"
        "print(' '.join(m for m in sys.modules if m.startswith(('gpuwaste.analyses', "
        "'gpuwaste.dashboard'))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True
    ).stdout.splitlines()
    assert set(out[0].split()) >= set(NAMES)
    assert out[1:] == [""]


def _imports(path: Path) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
    return names


# The layering of docs/architecture.md: the layers each package may import besides the shared
# modules (SHARED). `cli`, `__main__` (the entry point) and `demo` run every layer and may
# import them all.
SHARED = {
    *("gpuwaste", "config", "dialects", "errors", "text", "columns", "render", "cli_common"),
    *("process", "jobstats_summary"),
}
ENTRIES = {"cli", "__main__", "demo"}
LAYERS: dict[str, set[str]] = {
    "warehouse": set(),
    "ingest": {"warehouse"},
    "generate": {"warehouse"},
    "analyses": {"warehouse"},
    "act": {"analyses", "warehouse"},
    "exporter": {"analyses", "warehouse"},
    "dashboard": {"act", "analyses", "warehouse"},
}


def _part(name: str) -> str:
    """The package (or shared module) of a `gpuwaste...` module name."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _layer_imports() -> dict[str, set[tuple[str, str]]]:
    """Per package (and shared module): (file, gpuwaste package) of each of its imports, those
    inside functions included."""
    out: dict[str, set[tuple[str, str]]] = {}
    for path in sorted((REPO / "gpuwaste").rglob("*.py")):
        rel = path.relative_to(REPO / "gpuwaste")
        here = rel.parts[0] if len(rel.parts) > 1 else rel.stem
        here = "gpuwaste" if here == "__init__" else here
        found = out.setdefault(here, set())
        for name in _imports(path):
            if name == "gpuwaste" or name.startswith("gpuwaste."):
                found.add((str(rel), _part(name)))
    return out


def test_each_layer_imports_only_the_layers_below_it() -> None:
    graph = _layer_imports()
    assert set(LAYERS) | SHARED | ENTRIES == set(graph)  # a new package takes a place
    for package, imports in graph.items():
        allowed = set(graph) if package in ENTRIES else LAYERS.get(package, set())
        wrong = {(f, p) for f, p in imports if p not in allowed | SHARED | {package}}
        assert not wrong, f"{package} imports a layer above it or beside it: {sorted(wrong)}"
    for module in SHARED:  # the shared modules import no layer
        assert {p for _, p in graph[module]} <= SHARED, module


def test_only_the_dashboard_imports_the_dashboard() -> None:
    """The analyses, `gpuwaste job` / `notify` / `policy` (act/) and the exporter share reads with
    the dashboard through gpuwaste.analyses.reads, never through the Streamlit app's package."""
    for package in ("analyses", "act", "exporter"):
        for path in sorted((REPO / "gpuwaste" / package).rglob("*.py")):
            for name in _imports(path):
                assert not name.startswith("gpuwaste.dashboard"), (path, name)


def _temp_names(con: duckdb.DuckDBPyConnection) -> set[str]:
    views = con.sql("select view_name from duckdb_views() where temporary").fetchall()
    tables = con.sql("select table_name from duckdb_tables() where temporary").fetchall()
    return {r[0] for r in views + tables}


def test_the_per_job_pass_takes_its_names_off_the_connection(tmp_path: Path) -> None:
    write_two_jobs(tmp_path)
    as_of = T0.replace(hour=12)
    with connect(tmp_path) as con:
        before = _temp_names(con)
        result = run_batch(con, "c", ["a", "b"], Thresholds(), as_of)
        assert result.frames["job_usage"].height == 2
        assert _temp_names(con) == before


def test_a_step_that_raises_leaves_no_name_on_the_connection(tmp_path: Path) -> None:
    """The last per-GPU step reads host_samples; without that view it raises, after a dozen
    frames and temp tables were put on the connection: none is left."""
    write_two_jobs(tmp_path)
    with connect(tmp_path) as con:
        before = _temp_names(con)
        con.execute("drop view host_samples")
        with pytest.raises(duckdb.CatalogException, match="host_samples"):
            run_batch(con, "c", ["a", "b"], Thresholds(), datetime(2026, 11, 2, tzinfo=UTC))
        assert _temp_names(con) == before - {"host_samples"}
    # nor a thread reading samples ahead
    assert not [t for t in threading.enumerate() if t.name.startswith("gpuwaste-read")]


def test_analyze_cluster_closes_its_connection_on_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A memory limit DuckDB refuses fails right after the connection opens: it is closed."""
    write_two_jobs(tmp_path)
    opened: list[duckdb.DuckDBPyConnection] = []

    def recording_connect(data_dir: Path) -> duckdb.DuckDBPyConnection:
        opened.append(connect(data_dir))
        return opened[-1]

    monkeypatch.setattr(run_module, "connect", recording_connect)
    with pytest.raises(duckdb.Error):
        run_module.analyze_cluster(Settings(data_dir=tmp_path), "c", memory_limit="lots")
    assert len(opened) == 1
    with pytest.raises(duckdb.ConnectionException):
        opened[0].execute("select 1")


def test_analyze_cluster_times_the_per_job_pass_and_each_analysis_after_it(
    tmp_path: Path,
) -> None:
    """The CPU seconds bench/analyze.py reads: the per-job pass, then every summary and
    cluster-rows table in the order they ran."""
    write_two_jobs(tmp_path)
    run = run_module.analyze_cluster(Settings(data_dir=tmp_path), "c")
    assert list(run.cpu_seconds) == ["per_job", *(a.name for a in AFTER_PER_JOB)]
    assert all(s >= 0 for s in run.cpu_seconds.values())
    assert run.cpu_seconds["per_job"] > 0
