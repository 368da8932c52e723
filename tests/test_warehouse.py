"""Warehouse writes: idempotent windows, atomic replace, upserts, and the DuckDB catalog."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import polars as pl
import pytest

from gpuwaste.warehouse import Warehouse, WarehouseError, connect, refresh_catalog, store
from gpuwaste.warehouse.bookkeeping import (
    Refused,
    get_watermark,
    set_watermark,
    write_quarantine,
)
from gpuwaste.warehouse.catalog import CATALOG_FILE
from gpuwaste.warehouse.lock import WarehouseLocked, writer_lock
from gpuwaste.warehouse.store import atomic_write_parquet
from tests.support.sample_rows import samples

T0 = datetime(2026, 11, 1, 23, 0, tzinfo=UTC)


def count(data_dir: Path, sql: str) -> int:
    row = connect(data_dir).sql(sql).fetchall()[0]
    return int(row[0])


def test_same_window_twice_leaves_one_copy(data_dir: Path) -> None:
    wh = Warehouse(data_dir)
    end = T0 + timedelta(hours=2)  # crosses midnight: two day files
    df = samples(T0, 480)
    assert wh.replace_window("gpu_samples", "c1", T0, end, df, source="test") == 960
    wh.replace_window("gpu_samples", "c1", T0, end, df, source="test")
    assert count(data_dir, "select count(*) from gpu_samples") == 960
    days = sorted(p.parent.name for p in wh.files("gpu_samples"))
    assert days == ["date=2026-11-01", "date=2026-11-02"]
    # A differently chunked re-run of the same range still leaves one copy.
    mid = T0 + timedelta(minutes=37)
    wh.replace_window("gpu_samples", "c1", T0, mid, df.filter(pl.col("ts") < mid), source="test")
    wh.replace_window("gpu_samples", "c1", mid, end, df.filter(pl.col("ts") >= mid), source="test")
    assert count(data_dir, "select count(*) from gpu_samples") == 960
    assert count(data_dir, "select count(distinct (host, gpu, ts)) from gpu_samples") == 960


def test_replace_window_keeps_other_windows_sources_and_clusters(data_dir: Path) -> None:
    wh = Warehouse(data_dir)
    a = samples(T0, 40)
    wh.replace_window("gpu_samples", "c1", T0, T0 + timedelta(minutes=10), a, source="test")
    b = samples(T0, 40).with_columns(pl.lit("other").alias("source"))
    wh.replace_window("gpu_samples", "c1", T0, T0 + timedelta(minutes=10), b, source="other")
    wh.replace_window("gpu_samples", "c2", T0, T0 + timedelta(minutes=10), a, source="test")
    later = samples(T0 + timedelta(minutes=10), 40, util=7.0)
    wh.replace_window(
        "gpu_samples",
        "c1",
        T0 + timedelta(minutes=10),
        T0 + timedelta(minutes=20),
        later,
        source="test",
    )
    # Replacing the first window with fewer rows removes exactly that window's old rows.
    wh.replace_window(
        "gpu_samples", "c1", T0, T0 + timedelta(minutes=10), a.head(10), source="test"
    )
    got = (
        connect(data_dir)
        .sql("select cluster, source, count(*) from gpu_samples group by all order by all")
        .fetchall()
    )
    assert got == [("c1", "other", 80), ("c1", "test", 10 + 80), ("c2", "test", 80)]


def test_rows_outside_window_are_refused(data_dir: Path) -> None:
    wh = Warehouse(data_dir)
    with pytest.raises(ValueError, match="outside"):
        wh.replace_window("gpu_samples", "c1", T0, T0 + timedelta(seconds=30), samples(T0, 4))
    assert wh.files("gpu_samples") == []


def test_atomic_replace_failure_leaves_old_file(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wh = Warehouse(data_dir)
    wh.replace_window(
        "gpu_samples", "c1", T0, T0 + timedelta(minutes=5), samples(T0, 20), source="test"
    )
    [path] = wh.files("gpu_samples")
    before = path.read_bytes()

    def boom(df: pl.DataFrame, file: Path, **kw: object) -> None:
        file.write_bytes(b"partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(store, "write_parquet_file", boom)
    with pytest.raises(WarehouseError, match="No space left on device") as err:
        wh.replace_window(
            "gpu_samples", "c1", T0, T0 + timedelta(minutes=5), samples(T0, 5), source="test"
        )
    assert f"the disk holding {path.parent} is full" in str(err.value)
    assert f"{path.name} was not written" in str(err.value)
    assert path.read_bytes() == before
    assert sorted(os.listdir(path.parent)) == ["data.parquet"]  # no temporary file left


def test_reader_sees_old_or_new_never_half(data_dir: Path) -> None:
    """A reader holding the old file keeps reading it after the rename (POSIX semantics)."""
    dest = data_dir / "x.parquet"
    atomic_write_parquet(pl.DataFrame({"a": list(range(1000))}), dest)
    with open(dest, "rb") as held:
        atomic_write_parquet(pl.DataFrame({"a": list(range(5))}), dest)
        assert pl.read_parquet(held).height == 1000
    assert pl.read_parquet(dest).height == 5


def test_upsert_updates_instead_of_duplicating(data_dir: Path) -> None:
    wh = Warehouse(data_dir)
    job = {"job_id": "42", "user": "u", "vc": "v", "state": "running", "gpus": 2, "source": "slurm"}
    wh.upsert("jobs", "c1", "slurm", pl.DataFrame([job]))
    wh.upsert(
        "jobs", "c1", "slurm", pl.DataFrame([{**job, "state": "passed"}, {**job, "job_id": "43"}])
    )
    rows = connect(data_dir).sql("select job_id, state from jobs order by job_id").fetchall()
    assert rows == [("42", "passed"), ("43", "running")]


def test_watermark_and_quarantine_are_idempotent(data_dir: Path) -> None:
    wh = Warehouse(data_dir)
    assert get_watermark(wh, "c1", "prometheus") is None
    set_watermark(wh, "c1", "prometheus", T0)
    set_watermark(wh, "c1", "prometheus", T0 + timedelta(hours=1))
    assert get_watermark(wh, "c1", "prometheus") == T0 + timedelta(hours=1)
    refused = [Refused("f.txt:3", "bad time: 'x'", "raw line")]
    write_quarantine(wh, "c1", "slurm", "f.txt", refused)
    write_quarantine(wh, "c1", "slurm", "f.txt", refused)
    write_quarantine(wh, "c1", "slurm", "g.txt", refused)
    assert count(data_dir, "select count(*) from quarantine") == 2
    assert count(data_dir, "select count(*) from ingest_state") == 1


def test_writer_lock_refuses_second_writer(data_dir: Path) -> None:
    code = (
        "import sys, time; from pathlib import Path; from gpuwaste.warehouse.lock import writer_lock\n"
        "with writer_lock(Path(sys.argv[1])):\n print('held', flush=True); time.sleep(30)\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code, str(data_dir)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(WarehouseLocked, match="already running"), writer_lock(data_dir):
            pass
    finally:
        holder.kill()
        holder.wait()
    with writer_lock(data_dir):  # released by the kernel when the holder died
        pass


def test_empty_warehouse_has_typed_empty_views(data_dir: Path) -> None:
    con = connect(data_dir)
    assert con.sql("select count(*) from gpu_samples").fetchall() == [(0,)]
    cols = {r[0]: r[1] for r in con.sql("describe jobs").fetchall()}
    assert cols["start_ts"] == "TIMESTAMP WITH TIME ZONE" and cols["gpus"] == "INTEGER"


def test_catalog_opens_in_python_and_standalone_duckdb(data_dir: Path) -> None:
    wh = Warehouse(data_dir)
    wh.replace_window(
        "gpu_samples", "c1", T0, T0 + timedelta(minutes=5), samples(T0, 20), source="test"
    )
    assert refresh_catalog(data_dir) is True
    assert refresh_catalog(data_dir) is False  # unchanged set of tables: not rewritten
    cat = data_dir / CATALOG_FILE
    con = duckdb.connect(str(cat), read_only=True)
    assert con.sql("select count(*) from gpu_samples").fetchall() == [(40,)]
    con.close()
    cli = Path(sys.executable).parent / "duckdb"
    out = subprocess.run(
        [str(cli), "-readonly", "-csv", str(cat), "-c", "select count(*) as n from gpu_samples"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert out.stdout.split() == ["n", "40"]
    # New table gets data -> catalog rewritten and the view now reads it.
    wh.upsert("jobs", "c1", "slurm", pl.DataFrame([{"job_id": "1", "state": "passed"}]))
    assert refresh_catalog(data_dir) is True
    out = subprocess.run(
        [str(cli), "-readonly", "-csv", str(cat), "-c", "select job_id, cluster from jobs"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert out.stdout.split() == ["job_id,cluster", "1,c1"]


def duckdb_cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    cli = Path(sys.executable).parent / "duckdb"
    return subprocess.run(
        [str(cli), "-csv", *args], capture_output=True, text=True, timeout=60, cwd=cwd
    )


COUNTS = "select (select count(*) from gpu_samples) as samples, (select count(*) from jobs) as jobs"


def test_catalog_opens_from_any_directory_and_after_the_folder_moves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's path: a relative `gpuwaste-data`, opened by the standalone duckdb CLI from
    elsewhere, then moved as a whole and opened again before gpuwaste runs there."""
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    rel = Path("gpuwaste-data")
    wh = Warehouse(rel)
    wh.replace_window(
        "gpu_samples", "c1", T0, T0 + timedelta(minutes=5), samples(T0, 20), source="test"
    )
    wh.upsert("jobs", "c1", "slurm", pl.DataFrame([{"job_id": "1", "state": "passed"}]))
    assert refresh_catalog(rel) is True
    expected = ["samples,jobs", "40,1"]
    opened = {
        "the project, relative": (project, "gpuwaste-data/gpuwaste.duckdb"),
        "/, absolute": (Path("/"), str(project / "gpuwaste-data" / CATALOG_FILE)),
        "the data folder, bare name": (project / "gpuwaste-data", CATALOG_FILE),
        "a sibling, ../": (tmp_path, "project/gpuwaste-data/gpuwaste.duckdb"),
    }
    for where, (cwd, path) in opened.items():
        out = duckdb_cli(cwd, "-readonly", path, "-c", COUNTS)
        assert out.returncode == 0, (where, out.stderr)
        assert out.stdout.split() == expected, where

    moved = tmp_path / "elsewhere" / "renamed-data"
    moved.parent.mkdir()
    (project / "gpuwaste-data").rename(moved)
    for cwd, path in [(Path("/"), str(moved / CATALOG_FILE)), (moved, CATALOG_FILE)]:
        out = duckdb_cli(cwd, "-readonly", path, "-c", COUNTS)
        assert out.returncode == 0, (cwd, out.stderr)
        assert out.stdout.split() == expected, cwd
    con = duckdb.connect(str(moved / CATALOG_FILE), read_only=True)  # the Python package (2.x)
    assert con.sql(COUNTS).fetchall() == [(40, 1)]
    con.close()
    # gpuwaste's own readers build their views from the folder they are given.
    assert count(moved, "select count(*) from gpu_samples") == 40


def test_attached_catalog_reads_the_folder_it_was_written_in(tmp_path: Path) -> None:
    """ATTACHed to another database, the views cannot see where the file was opened from and
    read the absolute folder of the last refresh; gpuwaste rewrites it after a move."""
    data_dir = tmp_path / "wh"
    Warehouse(data_dir).upsert(
        "jobs", "c1", "slurm", pl.DataFrame([{"job_id": "1", "state": "passed"}])
    )
    refresh_catalog(data_dir)
    attach = (
        f"attach '{data_dir / CATALOG_FILE}' as g (read_only); select count(*) as n from g.jobs"
    )
    out = duckdb_cli(Path("/"), "-c", attach)
    assert out.returncode == 0 and out.stdout.split() == ["n", "1"], out.stderr
    moved = tmp_path / "moved"
    data_dir.rename(moved)
    assert refresh_catalog(moved) is True  # the folder changed: rewritten for the new place
    attach = f"attach '{moved / CATALOG_FILE}' as g (read_only); select count(*) as n from g.jobs"
    out = duckdb_cli(Path("/"), "-c", attach)
    assert out.returncode == 0 and out.stdout.split() == ["n", "1"], out.stderr
