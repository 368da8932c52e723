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

import json
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
    refuse_settings_readers(sql)
    return sql


# Functions that read the connection's settings (which name the warehouse folder, its temp
# folder and allowed directories), and those that run a query given as text, which could call them.
SETTINGS_READERS = frozenset({"current_setting", "duckdb_settings", "query", "query_table"})


def refuse_settings_readers(sql: str) -> None:
    """Raise QueryRefused when the (single, read) statement calls one of SETTINGS_READERS, at
    any depth: the parse tree names every scalar and table function the query calls."""
    parser = duckdb.connect(":memory:")
    try:
        text = parser.execute("select json_serialize_sql(?)", [sql]).fetchall()[0][0]
    finally:
        parser.close()
    tree = json.loads(text)
    if tree.get("error"):
        raise QueryRefused(f"the query could not be checked: {tree.get('error_message', '')}.")
    called = {n.lower() for n in _function_names(tree)} & SETTINGS_READERS
    if called:
        raise QueryRefused(
            f"{sorted(called)[0]}() is not available here: the connection's settings are hidden."
        )


def _function_names(node: object) -> list[str]:
    found: list[str] = []
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            name = item.get("function_name")
            if isinstance(name, str):
                found.append(name)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


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


def read_only_connection(
    data_dir: Path, memory_mib: int | None = None
) -> duckdb.DuckDBPyConnection:
    """An in-memory connection with the warehouse views that cannot reach outside the warehouse;
    with `memory_mib`, DuckDB's own memory for it is bounded (`limit_memory`)."""
    con = connect(data_dir)
    hide_paths(con)
    if memory_mib is not None:
        limit_memory(con, memory_mib)
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


def hide_paths(con: duckdb.DuckDBPyConnection) -> None:
    """Blank the secrets folder (default ~/.duckdb/stored_secrets, which names the home
    directory in `duckdb_secrets()`'s error too): no query can create a secret anyway."""
    con.execute("SET allow_persistent_secrets = false")
    con.execute("SET secret_directory = ''")


# DuckDB's buffer manager gets this share of a query's memory bound: what it tracks (hash tables,
# aggregates such as string_agg, sorts) fails with its own error first, leaving room for what it
# does not track (strings built by scalar functions, the result handed to Python), which the
# process's bound catches (gpuwaste.warehouse.bounded).
DUCKDB_SHARE = 0.75
# What a bounded query may spill to the warehouse's .sql_tmp folder, in multiples of its memory.
SPILL_TIMES = 4


def limit_memory(con: duckdb.DuckDBPyConnection, memory_mib: int) -> None:
    """Bound DuckDB's memory for `con`'s database, and what it may spill to its temp folder."""
    con.execute(f"SET memory_limit = '{int(memory_mib * DUCKDB_SHARE)}MiB'")
    con.execute(f"SET max_temp_directory_size = '{int(memory_mib) * SPILL_TIMES}MiB'")
