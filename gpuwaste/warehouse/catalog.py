"""The DuckDB side of a data directory: views over the parquet, in memory or in a catalog file.

`<data_dir>/gpuwaste.duckdb` holds only view definitions, so `duckdb <data_dir>/gpuwaste.duckdb`
answers ad hoc SQL with no set-up. It is rewritten (new file, then rename) only when the set of
tables with data changes, and written with storage compatibility v1.5.0 so that the standalone
`duckdb` command-line tool (1.5.x) opens it as well as the Python package (2.x).

Readers inside gpuwaste never hold the catalog file open: `connect()` builds the same views in an
in-memory connection (over absolute paths), so ingest and analyze can run while the dashboard
reads; an analyze batch's connection names only the day files it reads (`narrow_dated_views`).

The catalog file's views find the parquet next to the file, wherever it was opened from and
wherever the folder was moved: DuckDB resolves a relative path against the process's working
directory, and a view cannot ask where its database file is (a table function takes no
subquery), but DuckDB's default `temp_directory` is `<database file>.tmp`, a setting a view can
read. Where that setting was changed, or the file is ATTACHed to another database, the views
read the absolute folder the catalog was last written in (gpuwaste rewrites the catalog when the
folder moved, at its next write).
"""

from __future__ import annotations

import json
import os
import uuid
import weakref
from collections.abc import Collection
from datetime import date
from pathlib import Path

import duckdb
import polars as pl

from gpuwaste.warehouse.disk import writing
from gpuwaste.warehouse.reading import read_rows, run
from gpuwaste.warehouse.schema import UTC_TS, Table, all_tables
from gpuwaste.warehouse.store import Warehouse, sql_string

CATALOG_FILE = "gpuwaste.duckdb"
SIGNATURE_FILE = "catalog.json"
STORAGE_COMPAT = "v1.5.0"
# How the catalog file's views name their files; a new layout rewrites older catalogs.
VIEW_LAYOUT = 2
# The folder DuckDB opened the catalog file from, with its trailing slash ('' for the working
# directory), from DuckDB's default temp_directory '<database file>.tmp'.
_OPENED_FROM = (
    "regexp_replace(current_setting('temp_directory'), "
    f"'{CATALOG_FILE.replace('.', '[.]')}[.]tmp$', '')"
)


def _duck_type(dtype: pl.DataType) -> str:
    if dtype == UTC_TS:
        return "TIMESTAMPTZ"
    mapping: dict[type[pl.DataType], str] = {
        pl.String: "VARCHAR",
        pl.Int16: "SMALLINT",
        pl.Int32: "INTEGER",
        pl.Int64: "BIGINT",
        pl.Float64: "DOUBLE",
        pl.Float32: "FLOAT",
        pl.Boolean: "BOOLEAN",
        pl.Date: "DATE",
        pl.Datetime: "TIMESTAMP",
    }
    for cls, name in mapping.items():
        if isinstance(dtype, cls):
            return name
    raise TypeError(f"no DuckDB type for {dtype}")


def absolute_folder(data_dir: Path) -> str:
    """SQL for the data directory, absolute, with a trailing slash."""
    return sql_string(str(Path(data_dir).resolve()).rstrip("/") + "/")


def folder_of_catalog_file(data_dir: Path) -> str:
    """SQL for the folder of the catalog file that holds the view, with a trailing slash: where
    DuckDB opened the file from, else (temp_directory set, or the file ATTACHed) `data_dir`."""
    opened_as_catalog = f"ends_with(current_setting('temp_directory'), '{CATALOG_FILE}.tmp')"
    return (
        f"(CASE WHEN {opened_as_catalog} THEN {_OPENED_FROM} ELSE {absolute_folder(data_dir)} END)"
    )


def stored_columns(t: Table, files: list[Path]) -> frozenset[str]:
    """Columns present in at least one of the table's `files` (read from the parquet footers),
    plus the partition columns, which live in the paths.

    A column added to a table in a later gpuwaste version is absent from files written before:
    its view reads it as NULL until the table is rewritten, instead of failing to bind.
    """
    found: set[str] = set(t.partition_cols)
    for path in files:
        try:
            found.update(pl.read_parquet_schema(path))
        except FileNotFoundError:
            continue  # replaced or removed under us: the next read sees the new set
        except Exception:  # unreadable footer: the query itself will name the file
            return frozenset(t.columns)
        if found >= t.columns.keys():
            break
    return frozenset(found)


def view_sql(
    wh: Warehouse, t: Table, folder: str | None = None, only: list[Path] | None = None
) -> str:
    """`SELECT` that a view of table `t` is defined as (typed and empty when it has no files).

    `folder` is SQL for the data directory with a trailing slash (default: its absolute path);
    the view reads the files under it, or, when `only` is given, those files only (named by
    their absolute paths; `folder` is then not used)."""
    files = wh.files(t.name) if only is None else only
    present = stored_columns(t, files)
    cols = [
        f'CAST("{c}" AS {_duck_type(d)}) AS "{c}"'
        if c in present
        else f'CAST(NULL AS {_duck_type(d)}) AS "{c}"'
        for c, d in t.columns.items()
    ]
    if t.layout == "dated":
        cols.append('CAST("date" AS DATE) AS "date"')
    if not files:
        nulls = [f'CAST(NULL AS {_duck_type(d)}) AS "{c}"' for c, d in t.columns.items()]
        if t.layout == "dated":
            nulls.append('CAST(NULL AS DATE) AS "date"')
        return f"SELECT {', '.join(nulls)} WHERE false"
    glob = wh.table_dir(t.name) / ("*/*/*.parquet" if t.layout == "dated" else "*/*.parquet")
    files_sql = (
        f"{folder or absolute_folder(wh.data_dir)} || {sql_string(glob.relative_to(wh.data_dir))}"
        if only is None
        else f"[{', '.join(sql_string(f.resolve()) for f in only)}]"
    )
    hive = (
        "{'cluster': 'VARCHAR', 'date': 'DATE'}"
        if t.layout == "dated"
        else "{'cluster': 'VARCHAR'}"
    )
    return (
        f"SELECT {', '.join(cols)} FROM read_parquet({files_sql}, hive_partitioning = true, "
        f"hive_types = {hive}, union_by_name = true)"
    )


# The connections whose dated views name no file yet (`connect(dated=False)`, not narrowed since),
# held weakly: a closed and dropped connection leaves the set by itself.
_UNBOUND: weakref.WeakSet[duckdb.DuckDBPyConnection] = weakref.WeakSet()


def create_views(
    con: duckdb.DuckDBPyConnection, wh: Warehouse, folder: str | None = None, dated: bool = True
) -> None:
    """A view per table (DuckDB reads each table's files' schemas here: a damaged file is named
    in one sentence); with `dated` False, the dated tables' views name no file yet."""
    for t in all_tables().values():
        only: list[Path] | None = None if dated or t.layout != "dated" else []
        _create_view(con, t, view_sql(wh, t, folder, only))


def _create_view(con: duckdb.DuckDBPyConnection, t: Table, sql: str) -> None:
    """The view of table `t` as `sql` (tried again when a file was replaced under it); a damaged
    file it names is said in one sentence (`DamagedFileError`)."""
    run(con, f'CREATE OR REPLACE VIEW "{t.name}" AS {sql}')


def narrow_dated_views(
    con: duckdb.DuckDBPyConnection,
    data_dir: Path,
    cluster: str,
    first: date,
    last: date,
    hosts: Collection[str] | None = None,
) -> None:
    """(Re)define the views of the dated tables (the samples) on `con` over the files of
    `cluster` from day `first` to day `last` only, and with `hosts`, of each day only the blocks
    that hold one of them (`host_blocks`), for a connection that reads no other days and hosts
    (an analyze batch's, made with `connect(data_dir, dated=False)`).

    The views name those files as they are now: a file replaced later is read anew, one added
    or moved aside is not seen. Binding a view reads the footer of every file it names
    (`union_by_name`), the connection keeps what it bound while it is open (measured per file:
    docs/scale.md), and a batch's connection keeps the footers it read (`parquet_metadata_cache`):
    over the whole warehouse, that grew with its history, its clusters and, within a day file,
    with the cluster's hosts (docs/scale.md)."""
    wh = Warehouse(data_dir)
    for t in all_tables().values():
        if t.layout == "dated":
            only = wh.day_files(t.name, cluster, first, last, hosts)
            _create_view(con, t, view_sql(wh, t, only=only))
    _UNBOUND.discard(con)


def connect(data_dir: Path, dated: bool = True) -> duckdb.DuckDBPyConnection:
    """An in-memory connection with a view per warehouse table (UTC session); with `dated`
    False, the dated tables' views are empty until `narrow_dated_views` names their files."""
    wh = Warehouse(data_dir)
    con = duckdb.connect(":memory:")
    run(con, "SET TimeZone = 'UTC'")
    create_views(con, wh, dated=dated)
    if not dated:
        _UNBOUND.add(con)
    return con


def days_unbound(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether `con` was made with `dated=False` and its samples' views name no file yet."""
    return con in _UNBOUND


# Settings DuckDB keeps per connection (a cursor starts from their defaults), which the
# warehouse's connections set: the UTC session of `connect`, and a batch's read settings.
SESSION_SETTINGS = ("TimeZone", "parquet_metadata_cache", "preserve_insertion_order")


def cursor(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """A connection of its own to `con`'s database, for another thread: the same views and
    memory limit, its own temp tables and variables, and `con`'s SESSION_SETTINGS."""
    cur = con.cursor()
    for name in SESSION_SETTINGS:
        value = read_rows(con, "select current_setting(?)", [name])[0][0]
        run(cur, f"set session {name} = {sql_string(str(value))}")
    return cur


def _signature(wh: Warehouse) -> dict[str, object]:
    tables: dict[str, object] = {}
    for name, t in sorted(all_tables().items()):
        files = wh.files(name)
        tables[name] = {
            "has_files": bool(files),
            "columns": list(t.columns),
            "stored": sorted(stored_columns(t, files)),
        }
    return {"root": str(wh.root.resolve()), "views": VIEW_LAYOUT, "tables": tables}


def refresh_catalog(data_dir: Path, *, force: bool = False) -> bool:
    """Rewrite `<data_dir>/gpuwaste.duckdb` if the set of tables changed; True if rewritten."""
    wh = Warehouse(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    sig = _signature(wh)
    sig_path = data_dir / SIGNATURE_FILE
    dest = data_dir / CATALOG_FILE
    if not force and dest.exists() and sig_path.exists():
        try:
            if json.loads(sig_path.read_text()) == sig:
                return False
        except (OSError, ValueError):
            pass
    tmp = data_dir / f".{CATALOG_FILE}.tmp-{uuid.uuid4().hex}"
    sig_tmp = sig_path.with_name(sig_path.name + ".tmp")
    # DuckDB says a full disk (the file, or its WAL at the commit) only in its message
    try:
        with writing(dest, f"{CATALOG_FILE} was not written and its views are as they were"):
            con = duckdb.connect(str(tmp), config={"storage_compatibility_version": STORAGE_COMPAT})
            try:
                con.execute("SET TimeZone = 'UTC'")
                create_views(con, wh, folder_of_catalog_file(data_dir))
            finally:
                con.close()
            os.replace(tmp, dest)
        with writing(sig_path):  # written after the views: the next refresh rewrites them
            sig_tmp.write_text(json.dumps(sig, indent=1, sort_keys=True))
            os.replace(sig_tmp, sig_path)
    finally:
        tmp.unlink(missing_ok=True)
        Path(str(tmp) + ".wal").unlink(missing_ok=True)
        sig_tmp.unlink(missing_ok=True)
    return True
