"""The one way gpuwaste runs SQL over the warehouse outside its writers.

Every statement a reader runs (a query, a view or temp table built from the tables, a variable
set) goes through a function here, and each of them runs it under `damaged.read_retrying`: a
file that a concurrent `ingest` or `analyze` replaced between DuckDB's two opens of it
(footer, then row groups) is read again, and a file still unreadable after the retries is its
one sentence (`DamagedFileError`), never a traceback. Readers take a connection from
`catalog.connect` or `readonly.read_only_connection` and hand it to these functions; they never
call the connection's own `sql`, `execute` or fetch methods. tests/test_read_path.py fails for
any module that does, but for the writers it names (ingest, analyze's batch connection, the
store) and why.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import duckdb
import polars as pl

from gpuwaste.warehouse.damaged import read_retrying


def _params(params: Sequence[Any] | None) -> list[Any] | None:
    return list(params) if params else None


def run(con: duckdb.DuckDBPyConnection, sql: str, params: Sequence[Any] | None = None) -> None:
    """Run a statement that returns nothing (CREATE VIEW / TEMP TABLE over the tables, SET
    VARIABLE, DROP): binding a view or filling a table reads the files it names."""
    read_retrying(lambda: con.execute(sql, _params(params)))


def read_rows(
    con: duckdb.DuckDBPyConnection, sql: str, params: Sequence[Any] | None = None
) -> list[tuple[Any, ...]]:
    """The rows of a query (with `?` or `$n` parameters) as Python tuples."""
    return read_retrying(lambda: con.execute(sql, _params(params)).fetchall())


def read_frame(
    con: duckdb.DuckDBPyConnection, sql: str, params: Sequence[Any] | None = None
) -> pl.DataFrame:
    """Run a query (with `?` parameters) and fetch it as a polars frame.

    The frame comes through Arrow once pyarrow is loaded (the dashboard, the exporter, analyze).
    A short command that has not loaded it (`gpuwaste job`) builds the same frame from Python
    rows when every column's type allows, which saves pyarrow's import, a good part of the
    command's second (bench/RESULTS.md, "`gpuwaste job` and `gpuwaste notify` on 1 M jobs");
    tests/test_read_frame.py checks that both ways give equal frames.
    """
    frame = read_query(con, sql, params)
    if frame is None:
        raise ValueError("not a query")
    return frame


def read_query(
    con: duckdb.DuckDBPyConnection,
    sql: str,
    params: Sequence[Any] | None = None,
    *,
    limit: int | None = None,
) -> pl.DataFrame | None:
    """`read_frame` of a statement that may give no rows at all (None: an operator's statement
    that is no query), at most `limit` rows of it when given."""

    def read() -> pl.DataFrame | None:
        rel = con.sql(sql, params=_params(params))
        if rel is None:
            return None
        if limit is not None:
            rel = rel.limit(limit)
        schema = None if "pyarrow" in sys.modules else row_schema(rel)
        return frame_from_arrow(rel) if schema is None else frame_from_rows(rel, schema)

    return read_retrying(read)


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


def frame_from_arrow(rel: duckdb.DuckDBPyRelation) -> pl.DataFrame:
    df = pl.from_arrow(rel.to_arrow_table())
    return df if isinstance(df, pl.DataFrame) else df.to_frame()


def frame_from_rows(
    rel: duckdb.DuckDBPyRelation, schema: list[tuple[str, pl.DataType]]
) -> pl.DataFrame:
    return pl.DataFrame(rel.fetchall(), schema=schema, orient="row")


__all__ = ["read_frame", "read_query", "read_rows", "run"]
