"""A batch's DuckDB connection keeps parquet footers in memory (`configure_batch_connection`), and
a partition replaced while the connection is open is still read as it is now, never through the
footer of the file it replaced. Its views of the samples are narrowed to the cluster's days the
batch reads (`narrow_dated_views`), with the same tables."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pytest

from gpuwaste.analyses.batch import configure_batch_connection, stable
from gpuwaste.analyses.per_job import run_batch
from gpuwaste.config import Thresholds
from gpuwaste.errors import DamagedFileError, GpuwasteError
from gpuwaste.generate import GeneratorSpec
from gpuwaste.warehouse import Warehouse, connect
from gpuwaste.warehouse.catalog import cursor, narrow_dated_views
from tests.support.generated_warehouse import write_generated
from tests.support.sample_rows import samples

DAY = datetime(2026, 11, 2, tzinfo=UTC)


def _write(wh: Warehouse, util: float, n: int, age_s: float | None) -> None:
    """Replace the day's samples; `age_s`: the file's modification time that many seconds ago
    (DuckDB trusts a cached footer only for a file last modified more than 10 s ago)."""
    wh.replace_window(
        "gpu_samples",
        "c1",
        DAY,
        DAY + timedelta(days=1),
        samples(DAY, n, gpus=1, util=util),
        source="test",
    )
    (path,) = wh.files("gpu_samples")
    if age_s is not None:
        then = time.time() - age_s
        os.utime(path, (then, then))


def _read(con: duckdb.DuckDBPyConnection) -> tuple[int, float]:
    row = con.sql("select count(*), max(util) from gpu_samples").fetchall()[0]
    return int(row[0]), float(row[1])


def test_batch_connection_settings(data_dir: Path) -> None:
    with connect(data_dir) as con:
        assert con.sql("select current_setting('parquet_metadata_cache')").fetchall() == [(False,)]
        configure_batch_connection(con, "700MB")
        settings = dict(
            con.sql(
                "select name, value from duckdb_settings() where name in "
                "('parquet_metadata_cache', 'preserve_insertion_order', 'memory_limit')"
            ).fetchall()
        )
    assert settings["parquet_metadata_cache"] == "true"
    assert settings["preserve_insertion_order"] == "false"
    assert settings["memory_limit"].startswith("667")  # 700 MB in MiB, as DuckDB shows it


def test_a_cursor_keeps_the_session_settings_a_cursor_of_duckdb_would_not(data_dir: Path) -> None:
    """The batch's reader thread reads on a cursor: DuckDB starts a cursor with its own defaults
    for the time zone and the footer cache (checked here, so that the test fails if DuckDB
    starts sharing them and `cursor` is no longer needed), and `cursor` copies them."""
    with connect(data_dir) as con:
        configure_batch_connection(con, "700MB")
        names = ("TimeZone", "parquet_metadata_cache", "preserve_insertion_order", "memory_limit")

        def settings(c: duckdb.DuckDBPyConnection) -> dict[str, str]:
            rows = c.execute(
                "select name, value from duckdb_settings() where name in (?, ?, ?, ?)", names
            ).fetchall()
            return dict(rows)

        with con.cursor() as plain:
            machine_zone = settings(plain)["TimeZone"]  # a cursor starts in the machine's zone
            zone = "Pacific/Chatham" if machine_zone != "Pacific/Chatham" else "Asia/Kathmandu"
            con.execute(f"set TimeZone = '{zone}'")
            assert settings(plain)["TimeZone"] == machine_zone != zone
            assert settings(plain)["parquet_metadata_cache"] == "false"
        with cursor(con) as copied:
            assert settings(copied) == settings(con)
            assert settings(copied)["TimeZone"] == zone
            assert copied.sql("select count(*) from gpu_samples").fetchall()[0][0] >= 0  # views


@pytest.mark.parametrize("narrowed", [False, True], ids=["whole warehouse", "narrowed"])
def test_a_partition_replaced_during_a_batch_is_read_anew(data_dir: Path, narrowed: bool) -> None:
    wh = Warehouse(data_dir)
    _write(wh, 50.0, 4000, age_s=120)
    with connect(data_dir, dated=not narrowed) as con:
        configure_batch_connection(con, "500MB")
        if narrowed:  # as a batch's connection is: the day's file named as it is now
            narrow_dated_views(con, data_dir, "c1", DAY.date(), DAY.date())
        assert _read(con) == (4000, 50.0)
        assert _read(con) == (4000, 50.0)  # served with the cached footer
        # Replaced just now (an ingest during the run): a new modification time.
        _write(wh, 70.0, 5000, age_s=None)
        assert _read(con) == (5000, 70.0)
        # Replaced and dated in the past, but not at the time the footer was cached.
        _write(wh, 90.0, 3000, age_s=60)
        assert _read(con) == (3000, 90.0)
        assert _read(con) == (3000, 90.0)


def _day_files(wh: Warehouse, cluster: str, utils: list[float]) -> None:
    """Samples of `cluster` on consecutive days from DAY, one day per util."""
    for i, util in enumerate(utils):
        start = DAY + timedelta(days=i)
        wh.replace_window(
            "gpu_samples",
            cluster,
            start,
            start + timedelta(days=1),
            samples(start, 10, gpus=1, util=util),
            source="test",
        )


def test_narrowed_views_read_only_the_batch_days_of_its_cluster(data_dir: Path) -> None:
    wh = Warehouse(data_dir)
    _day_files(wh, "c1", [10.0, 20.0, 30.0])
    _day_files(wh, "c2", [40.0, 50.0])
    first, last = DAY.date() + timedelta(days=1), DAY.date() + timedelta(days=2)
    assert wh.day_files("gpu_samples", "c1", first, last) == [
        wh.cluster_dir("gpu_samples", "c1") / f"date={d}" / "data.parquet" for d in (first, last)
    ]
    with connect(data_dir) as con:
        configure_batch_connection(con, "500MB")
        narrow_dated_views(con, data_dir, "c1", first, last)
        rows = con.sql(
            "select cluster, date, count(*), max(util) from gpu_samples group by all order by all"
        ).fetchall()
        assert rows == [("c1", first, 10, 20.0), ("c1", last, 10, 30.0)]
        assert con.sql("select count(*) from host_samples").fetchall() == [(0,)]  # no files
        # The first day's file is damaged now: a view over the whole warehouse can no longer
        # be made, the narrowed one never opens it.
        (day0, *_) = wh.files("gpu_samples")
        day0.write_bytes(b"not parquet")
        assert con.sql("select count(*) from gpu_samples").fetchall() == [(20,)]
    with pytest.raises(GpuwasteError, match="date=2026-11-02"):
        connect(data_dir)
    # A batch's connection names no day file until it knows its days; a damaged file among
    # them is said in one sentence.
    with connect(data_dir, dated=False) as con:
        assert con.sql("select count(*) from gpu_samples").fetchall() == [(0,)]
        narrow_dated_views(con, data_dir, "c2", first, last)
        assert con.sql("select count(*), max(util) from gpu_samples").fetchall() == [(10, 50.0)]
        with pytest.raises(DamagedFileError, match="date=2026-11-02"):
            narrow_dated_views(con, data_dir, "c1", DAY.date(), last)
        # the views name no file until narrowed: run_batch without the warehouse's folder says so
        with (
            connect(data_dir, dated=False) as unbound,
            pytest.raises(GpuwasteError, match="no file"),
        ):
            run_batch(unbound, "c1", ["j1"], Thresholds(), DAY + timedelta(days=3))


def test_a_batch_with_narrowed_views_gives_the_same_tables(tmp_path: Path) -> None:
    spec = GeneratorSpec(seed=3, gpus=16, days=3.0, interval_s=60, cluster="c")
    data = write_generated(spec, tmp_path)
    with connect(data) as con:
        jobs = con.sql(
            "select job_id from jobs where start_ts >= $1 order by job_id",
            params=[spec.start + timedelta(days=2)],
        ).fetchall()
    ids = [j for (j,) in jobs]
    assert ids
    as_of = spec.start + timedelta(days=spec.days)
    tables, days = [], []
    for narrow in (None, data):
        with connect(data, dated=narrow is None) as con:  # narrowed: as compute_batch makes it
            configure_batch_connection(con, "500MB")
            result = run_batch(con, "c", ids, Thresholds(), as_of, data_dir=narrow)
            days.append(con.sql("select count(distinct date) from gpu_samples").fetchall()[0][0])
        tables.append({name: stable(frame) for name, frame in result.frames.items()})
    assert days[1] < days[0]  # the narrowed views left out the days before the batch's jobs
    full, narrowed = tables
    assert full.keys() == narrowed.keys()
    for name, frame in full.items():
        assert frame.height, name
        assert frame.sort(frame.columns).equals(narrowed[name].sort(frame.columns)), name
