"""Read-only SQL over the warehouse, for `gpuwaste sql` and the dashboard's SQL page.

Two locks, each of which alone refuses most abuse:
1. the statement: exactly one statement, of type SELECT (which covers DESCRIBE, SHOW, SUMMARIZE,
   FROM-first and WITH queries). COPY, ATTACH, INSTALL, LOAD, PRAGMA, SET, CREATE, INSERT, ... and
   multiple statements are refused before anything runs;
2. the connection: `enable_external_access = false` with the warehouse's parquet folder as the
   only allowed directory, then `lock_configuration = true`, so no query can read a file outside
   the warehouse (`read_csv('/etc/passwd')`), install or load an extension, or attach a database.
"""

from __future__ import annotations

import re
from pathlib import Path

import duckdb

from gpuwaste.errors import GpuwasteError
from gpuwaste.warehouse.catalog import connect


class QueryRefused(GpuwasteError):
    """The query is not a single read-only statement; the message says why."""


def check_read_only(sql: str) -> str:
    """Return the single SELECT statement in `sql`, or raise QueryRefused."""
    parser = duckdb.connect(":memory:")
    try:
        try:
            statements = parser.extract_statements(sql)
        except duckdb.Error as exc:
            raise QueryRefused(str(exc).strip()) from None
    finally:
        parser.close()
    if not statements:
        raise QueryRefused("no SQL statement given.")
    if len(statements) > 1:
        raise QueryRefused("only one statement at a time is allowed.")
    stmt = statements[0]
    if stmt.type != duckdb.StatementType.SELECT:
        raise QueryRefused(
            f"only read queries (SELECT) are allowed, not {statement_keyword(stmt.query)}."
        )
    return sql


# Whitespace, `-- line` comments and `/* block */` comments at the start of a statement.
_LEADING_COMMENTS = re.compile(r"\A(?:\s+|--[^\n]*(?:\n|\Z)|/\*.*?\*/)*", re.DOTALL)


def statement_keyword(query: str) -> str:
    """The statement's leading keyword as written, e.g. `INSTALL` or `FORCE INSTALL`.

    DuckDB's statement types group several keywords (INSTALL is a LOAD statement, USE a SET,
    CHECKPOINT a CALL), so the refusal names what the operator typed instead. `query` is the
    text DuckDB extracted; its leading comments are skipped here (DuckDB 2.0.0 left them out of
    that text, 2.0.1 keeps them).
    """
    words = _LEADING_COMMENTS.sub("", query, count=1).split(None, 2)
    if not words:
        return "an empty statement"
    if words[0].upper() == "FORCE" and len(words) > 1:
        return f"FORCE {words[1].upper()}"
    return words[0].upper()


def read_only_connection(data_dir: Path) -> duckdb.DuckDBPyConnection:
    """An in-memory connection with the warehouse views that cannot reach outside the warehouse."""
    con = connect(data_dir)
    root = (Path(data_dir) / "parquet").resolve()
    # DuckDB allows its temp directory too (default `<cwd>/.tmp`, readable with read_text):
    # keep spill files inside the warehouse instead.
    con.execute("SET temp_directory = ?", [str(Path(data_dir).resolve() / ".sql_tmp")])
    con.execute("SET allowed_directories = ?", [[str(root) + "/"]])
    con.execute("SET enable_external_access = false")
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET autoload_known_extensions = false")
    con.execute("SET lock_configuration = true")
    return con


def run_query(data_dir: Path, sql: str) -> duckdb.DuckDBPyRelation | None:
    """Check and run one read-only query; DuckDB's own error surfaces as duckdb.Error."""
    check_read_only(sql)
    con = read_only_connection(data_dir)
    return con.sql(sql)
