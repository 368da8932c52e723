"""Every warehouse read outside the writers goes through `gpuwaste.warehouse.reading`.

A reader that runs SQL on a connection itself (`con.sql(...).pl()`, `con.execute(...)
.fetchall()`) or reads a parquet file itself (`pl.read_parquet`, `pl.scan_parquet`) skips the
retry that a file replaced by a concurrent `ingest` or `analyze` needs: the Policies page
showed `_duckdb.Error: Prefetch registered for bytes outside file` in 1 of 12 loads during
`analyze --rebuild` (issue 47, item 6). This test reads the source of every module of gpuwaste
and fails on any such call outside `reading.py` and the writers listed below, each with why.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "gpuwaste"
READ_MODULE = "warehouse/reading.py"

# Methods of a DuckDB connection or relation that run SQL or fetch its rows (the statement
# binds, and so reads the footers of, the files it names), and the polars / pyarrow calls that
# read a parquet file.
RUNS_OR_READS = frozenset(
    {
        "execute", "executemany", "sql", "query", "fetchall", "fetchone", "fetchmany",
        "fetchdf", "fetchnumpy", "fetch_df", "fetch_df_chunk", "fetch_arrow_table",
        "fetch_record_batch", "record_batch", "arrow", "pl", "df", "to_df", "to_arrow_table",
        "show", "read_parquet", "from_parquet", "read_csv", "from_csv_auto", "read_json",
        "scan_parquet", "read_parquet_schema", "read_parquet_metadata", "read_table",
        "ParquetFile", "read_metadata",
    }
)  # fmt: skip
# Modules whose own names for those are the same calls (`from duckdb import sql`).
READ_LIBRARIES = ("duckdb", "polars", "pyarrow")

# The writers, and the few calls that read no warehouse file, each with why it may run SQL or
# read parquet itself. A folder ends in "/"; "module.py" is the whole module; "module.py::f" is
# the top-level function or class `f` in it.
WRITERS: dict[str, str] = {
    "ingest/": "ingest writes the fact tables, under the writer lock (a second ingest exits): "
    "it reads what it wrote itself, and its sources' own files and servers",
    "analyses/batch.py": "analyze's batch connection (configure_batch_connection), which reads "
    "the plan file analyze wrote",
    "analyses/per_job.py": "analyze's batch connection: the per-job steps over its own frames "
    "and temp tables",
    "analyses/steps.py": "analyze's batch connection: the per-job steps (Relations) over its "
    "own frames and temp tables",
    "analyses/job_samples.py": "analyze's batch connection: the samples of a host range "
    "(under read_retrying itself; kept on `.pl()`, the hot read of analyze)",
    "analyses/staging.py": "analyze's staged per-job files, written and read by the same run",
    "analyses/plan.py": "analyze's plan files, written and read by the same run",
    "analyses/state.py": "analyze's own state files (fingerprints), under the analyze lock",
    "analyses/run.py": "analyze's connection for the summaries it writes, under the analyze lock",
    "warehouse/diagnose.py": "the one sentence `ingest` and `analyze` print when a cluster has "
    "no GPU time, over the fact files they just wrote, under their locks",
    "warehouse/store.py": "the store writes the files (atomic_copy_parquet), and reads one whole "
    "file at a time with polars (Warehouse.read: ingest_state, the notify ledger), which opens "
    "it once: an atomic replace gives the old file or the new one whole, never a mix",
    "warehouse/bookkeeping.py::write_quarantine_staged": "an ingest's quarantine merge, under "
    "the writer lock: it reads its own staged parts and the one file it replaces",
    "warehouse/catalog.py::refresh_catalog": "writes the catalog file (views only)",
    "warehouse/catalog.py::stored_columns": "polars reads each footer in one open; a file "
    "replaced or removed under it is skipped, and the views' own read is retried (`reading.run`)",
    "warehouse/footers.py::file_values": "pyarrow reads one footer in one open; a file "
    "replaced or removed under it, or damaged, counts as holding every column, and the read of "
    "its rows is retried (analyze's batch connection)",
    "warehouse/readonly.py::read_only_connection": "sets the guard's settings; reads no file",
    "warehouse/readonly.py::hide_paths": "sets two settings; reads no file",
    "warehouse/readonly.py::limit_memory": "sets the memory and spill bounds; reads no file",
    "warehouse/readonly.py::refuse_settings_readers": "asks DuckDB for the query's parse tree "
    "(json_serialize_sql of a constant); reads no file",
}


@dataclass(frozen=True)
class Bypass:
    module: str  # path under gpuwaste/
    line: int
    scope: str  # the top-level function or class it is in ('' at module level)
    call: str

    def __str__(self) -> str:
        return f"gpuwaste/{self.module}:{self.line} ({self.scope or 'module'}): {self.call}"


def bypasses(module: str, source: str) -> list[Bypass]:
    """The calls in `source` (the text of gpuwaste/`module`) that run SQL or read parquet."""
    found: list[Bypass] = []

    def visit(node: ast.AST, scope: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = scope
            if not scope and isinstance(
                child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
            ):
                inner = child.name
            if isinstance(child, ast.Call):
                func = child.func
                name = func.attr if isinstance(func, ast.Attribute) else None
                if name in RUNS_OR_READS:
                    found.append(Bypass(module, child.lineno, scope, f".{name}(...)"))
            if isinstance(child, ast.ImportFrom) and (child.module or "").startswith(
                READ_LIBRARIES
            ):
                for alias in child.names:
                    if alias.name in RUNS_OR_READS:
                        found.append(
                            Bypass(module, child.lineno, scope, f"from {child.module} import "
                                   f"{alias.name}")
                        )  # fmt: skip
            visit(child, inner)

    visit(ast.parse(source), "")
    return found


def allowed(b: Bypass) -> bool:
    if b.module == READ_MODULE:
        return True
    return any(
        b.module.startswith(w) if w.endswith("/") else w in (b.module, f"{b.module}::{b.scope}")
        for w in WRITERS
    )


def modules() -> dict[str, str]:
    return {
        p.relative_to(PACKAGE).as_posix(): p.read_text(encoding="utf-8")
        for p in sorted(PACKAGE.rglob("*.py"))
    }


def test_every_read_outside_the_writers_goes_through_the_read_module() -> None:
    found = [b for m, src in modules().items() for b in bypasses(m, src)]
    outside = [str(b) for b in found if not allowed(b)]
    assert not outside, (
        "these run SQL or read parquet without gpuwaste.warehouse.reading (read_frame, "
        "read_rows, read_query, run), so a file replaced under them fails the read: "
        + "; ".join(outside)
    )
    # every exception is still needed: an entry that allows nothing is removed, not kept
    used = {w for w in WRITERS if any(allowed_by(w, b) for b in found)}
    assert used == set(WRITERS), sorted(set(WRITERS) - used)


def allowed_by(entry: str, b: Bypass) -> bool:
    if entry.endswith("/"):
        return b.module.startswith(entry)
    return entry in (b.module, f"{b.module}::{b.scope}")


PLANTED = {
    "relation fetched": "def f(con):\n    return con.sql('select 1').pl()\n",
    "statement fetched": "def f(con):\n    return con.execute('select 1').fetchall()\n",
    "one row": "def f(con):\n    return con.execute('select 1').fetchone()\n",
    "temp table": "def f(con):\n    con.execute('create temp table t as select * from jobs')\n",
    "own connection": "import duckdb\nrow = duckdb.connect().sql('select 1').arrow()\n",
    "default connection": "from duckdb import sql\n",
    "polars read": "import polars as pl\ndef f(p):\n    return pl.read_parquet(p)\n",
    "polars scan": "import polars as pl\nclass C:\n    def f(self, p):\n"
    "        return pl.scan_parquet(p).collect()\n",
    "pyarrow read": "import pyarrow.parquet as pq\ndef f(p):\n    return pq.read_table(p)\n",
    "nested": "def f(con):\n    def read():\n        return con.sql('x').df()\n    return read\n",
}


@pytest.mark.parametrize("case", list(PLANTED))
def test_a_planted_bypass_is_caught(case: str) -> None:
    """The same code in a reader's module (the Policies page's replay, a dashboard view) fails
    the test; in the read module it is the read path itself."""
    for module in ("act/policy/replay.py", "dashboard/views/now.py", "analyses/report.py"):
        found = bypasses(module, PLANTED[case])
        assert found and not any(allowed(b) for b in found), (module, found)
    assert all(allowed(b) for b in bypasses(READ_MODULE, PLANTED[case]))


def test_the_readers_of_issue_47_bypass_it_as_they_were() -> None:
    """The unprotected reads found in issue 47 (at commit 8246e43), as written there: each is
    caught where it was."""
    before = {
        "act/policy/replay.py": "def replay(con):\n"
        "    df = con.sql(replay_sql(load_sql(TABLE_SQL))).pl()\n",
        "act/notify/digest.py": "def window_figures(con, n):\n"
        "    return WindowFigures(con.sql(GROUPS).pl(), con.sql(WORST, params=[n]).pl())\n",
        "act/job_report.py": "def closest_ids(con, j):\n"
        "    rows = con.execute('select job_id from job_usage', [j]).fetchall()\n",
        "analyses/report.py": "def _known_values(con, sql, params):\n"
        "    return [r[0] for r in con.execute(sql, params).fetchall()]\n",
        "analyses/freshness.py": "def newest_sample_ts(files):\n"
        "    con = duckdb.connect(':memory:')\n"
        "    row = con.execute('select max(ts) from read_parquet($1)', [files]).fetchone()\n",
    }
    for module, source in before.items():
        assert (PACKAGE / module).is_file(), module
        found = bypasses(module, source)
        assert found and not any(allowed(b) for b in found), module
