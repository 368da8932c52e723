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
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from gpuwaste.errors import GpuwasteError
from gpuwaste.warehouse.catalog import connect
from gpuwaste.warehouse.damaged import read_retrying


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


# DuckDB column types a frame can be built from Python rows with, and the polars dtype Arrow
# gives each (the connection's TimeZone is UTC, warehouse.catalog.connect).
_ROW_DTYPES: dict[str, pl.DataType] = {
    "BOOLEAN": pl.Boolean(),
    "TINYINT": pl.Int8(),
    "SMALLINT": pl.Int16(),
    "INTEGER": pl.Int32(),
    "BIGINT": pl.Int64(),
    "FLOAT": pl.Float32(),
    "DOUBLE": pl.Float64(),
    "VARCHAR": pl.String(),
    "DATE": pl.Date(),
    "TIMESTAMP": pl.Datetime("us"),
    "TIMESTAMP WITH TIME ZONE": pl.Datetime("us", "UTC"),
    "VARCHAR[]": pl.List(pl.String()),
}


def row_schema(rel: duckdb.DuckDBPyRelation) -> list[tuple[str, pl.DataType]] | None:
    """The frame's schema when every column has a type in _ROW_DTYPES, else None."""
    dtypes = [_ROW_DTYPES.get(str(t)) for t in rel.types]
    if any(d is None for d in dtypes) or len(set(rel.columns)) < len(rel.columns):
        return None
    return [(c, d) for c, d in zip(rel.columns, dtypes, strict=True) if d is not None]


def read_frame(
    con: duckdb.DuckDBPyConnection, sql: str, params: Sequence[Any] | None = None
) -> pl.DataFrame:
    """Run a query (with `?` parameters) and fetch it as a polars frame, read again when a file
    was replaced under it (`read_retrying`).

    The frame comes through Arrow once pyarrow is loaded (the dashboard, the exporter, analyze).
    A short command that has not loaded it (`gpuwaste job`) builds the same frame from Python
    rows when every column's type allows, which saves pyarrow's import (0.1-0.2 s of a 1 s
    answer); tests/test_read_frame.py checks that both ways give equal frames.
    """

    def read() -> pl.DataFrame:
        rel = con.sql(sql, params=list(params) if params else None)
        if rel is None:
            raise ValueError("not a query")
        schema = None if "pyarrow" in sys.modules else row_schema(rel)
        return frame_from_arrow(rel) if schema is None else frame_from_rows(rel, schema)

    return read_retrying(read)


def frame_from_arrow(rel: duckdb.DuckDBPyRelation) -> pl.DataFrame:
    df = pl.from_arrow(rel.to_arrow_table())
    assert isinstance(df, pl.DataFrame)
    return df


def frame_from_rows(
    rel: duckdb.DuckDBPyRelation, schema: list[tuple[str, pl.DataType]]
) -> pl.DataFrame:
    return pl.DataFrame(rel.fetchall(), schema=schema, orient="row")


def run_query(data_dir: Path, sql: str) -> duckdb.DuckDBPyRelation | None:
    """Check and run one read-only query; DuckDB's own error surfaces as duckdb.Error."""
    check_read_only(sql)
    con = read_only_connection(data_dir)
    return con.sql(sql)
