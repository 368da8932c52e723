"""The per-job rows of one analyze run, staged per batch, then committed table by table.

Every batch writes its rows to `<data_dir>/analyze_state/staging/<cluster>/<table>/batch-N.parquet`
(`batch.stage_batch`), so no process holds the rows of more than one batch. When every batch is
done, `commit` replaces each per-job result file by one DuckDB COPY that streams the kept rows of
the old file (all but the recomputed and removed jobs) and the staged rows into a temporary file
in sorted order (DuckDB spills to disk past its memory limit), then renames it over the old file.
A reader sees the old file or the new one; a run that fails before the commit leaves the tables
as they were, and the next run clears the staging folder.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import polars as pl

from gpuwaste.analyses import state
from gpuwaste.analyses.batch import staged_file
from gpuwaste.analyses.registry import PER_JOB_TABLES
from gpuwaste.warehouse.disk import writing
from gpuwaste.warehouse.schema import table
from gpuwaste.warehouse.store import Warehouse, atomic_copy_parquet, sql_string

FILE_KEY = "analyze"


def staging_dir(data_dir: Path, cluster: str) -> Path:
    """The (empty, freshly made) staging folder of `cluster`'s run."""
    path = Path(data_dir).absolute() / state.STATE_DIR / "staging" / cluster
    shutil.rmtree(path, ignore_errors=True)
    with writing(path, "nothing was written"):
        path.mkdir(parents=True)
    return path


def remove_staging(staging: Path) -> None:
    shutil.rmtree(staging, ignore_errors=True)


def _sql_list(paths: list[Path]) -> str:
    return "[" + ", ".join(sql_string(p) for p in paths) + "]"


def _copy_sorted(con: duckdb.DuckDBPyConnection, name: str, sources: list[str], dest: Path) -> None:
    """COPY the union of `sources` (SELECTs) into `dest`, sorted, through a temporary file."""
    t = table(name)
    cols = ", ".join(f'"{c}"' for c in t.stored_columns)
    order = ", ".join(f'"{c}" nulls first' for c in t.sort)
    union = " union all ".join(f"select {cols} from ({s})" for s in sources)
    query = f"select * from ({union})" + (f" order by {order}" if order else "")
    atomic_copy_parquet(con, query, dest)


def count_rows(con: duckdb.DuckDBPyConnection, paths: list[Path]) -> int:
    """Rows in parquet files `paths` (from their footers)."""
    if not paths:
        return 0
    return int(
        con.execute(f"select count(*) from read_parquet({_sql_list(paths)})").fetchall()[0][0]
    )


def commit_table(
    con: duckdb.DuckDBPyConnection,
    wh: Warehouse,
    cluster: str,
    name: str,
    staged: list[Path],
    keep_old: bool,
) -> tuple[int, int]:
    """Replace `name`'s result file of `cluster` by the `staged` rows plus, when `keep_old`,
    the old rows of the jobs not in the `touched_jobs` relation. Returns (rows staged, rows in
    the new file)."""
    dest = wh.cluster_file(name, cluster, FILE_KEY)
    sources = []
    if staged:
        sources.append(f"select * from read_parquet({_sql_list(staged)})")
    if keep_old and dest.exists():
        sources.append(
            f"select * from read_parquet({_sql_list([dest])}) "
            "where job_id not in (select job_id from touched_jobs)"
        )
    if not sources:
        wh.replace_file(name, cluster, FILE_KEY, pl.DataFrame())
        return 0, 0
    _copy_sorted(con, name, sources, dest)
    return count_rows(con, staged), count_rows(con, [dest])


def commit(
    data_dir: Path,
    cluster: str,
    staging: Path,
    batches: list[int],
    touched: Path | None,
    memory_limit: str,
) -> dict[str, int]:
    """Every per-job result file of `cluster`: the rows staged by `batches`, plus the old rows
    of the jobs not in the parquet file `touched` (recomputed or removed; None: a rebuild, every
    old row goes). Returns rows per table: all rows after a rebuild, else the rows staged."""
    wh = Warehouse(data_dir)
    rows: dict[str, int] = {}
    with duckdb.connect(":memory:") as con:
        con.execute("set TimeZone = 'UTC'")
        con.execute(f"set memory_limit = '{memory_limit}'")
        con.execute(f"set temp_directory = {sql_string(staging / 'spill')}")
        if touched is not None:
            con.execute(
                "create temp view touched_jobs as select job_id from read_parquet("
                f"{sql_string(touched)})"
            )
        for name in PER_JOB_TABLES:
            staged = [p for i in batches if (p := staged_file(staging, name, i)).exists()]
            new, total = commit_table(con, wh, cluster, name, staged, keep_old=touched is not None)
            rows[name] = new if touched is not None else total
    return rows


__all__ = ["FILE_KEY", "commit", "count_rows", "remove_staging", "staging_dir"]
