"""`gpuwaste sql` and the read-only connection: reads work, everything else is refused."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import polars as pl
import pytest

from gpuwaste.warehouse import Warehouse, refresh_catalog
from gpuwaste.warehouse.bounded import Bounds, query_frame
from gpuwaste.warehouse.readonly import QueryRefused, read_only_connection

T0 = datetime(2026, 11, 1, tzinfo=UTC)
# `gpuwaste sql`'s path (bounded.query_frame), with bounds no query here comes near
BOUNDS = Bounds(memory_mib=1024, timeout_s=60)


@pytest.fixture
def filled(data_dir: Path) -> Path:
    wh = Warehouse(data_dir)
    rows = pl.DataFrame(
        {
            "host": ["h"] * 4,
            "gpu": [0, 0, 1, 1],
            "ts": [T0, T0 + timedelta(seconds=15)] * 2,
            "util": [1.0, 2.0, 3.0, 4.0],
        }
    )
    wh.replace_window("gpu_samples", "c1", T0, T0 + timedelta(minutes=1), rows)
    refresh_catalog(data_dir)
    return data_dir


def gpuwaste(*args: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "gpuwaste"
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=120)


def test_reads_work(filled: Path) -> None:
    df = query_frame(
        filled, "select gpu, avg(util) from gpu_samples group by gpu order by gpu", BOUNDS
    )
    assert df is not None and df.rows() == [(0, 1.5), (1, 3.5)]
    for q in [
        "describe gpu_samples",
        "show tables",
        "from gpu_samples limit 1",
        "summarize gpu_samples",
    ]:
        assert query_frame(filled, q, BOUNDS) is not None


@pytest.mark.parametrize(
    "sql",
    [
        "copy (select 1) to 'x.csv'",
        "copy gpu_samples to '/tmp/leak.parquet'",
        "attach '/tmp/other.duckdb' as o",
        "install httpfs",
        "load httpfs",
        "pragma database_list",
        "set enable_external_access = true",
        "create table t as select 1",
        "insert into t values (1)",
        "drop view gpu_samples",
        "select 1; select 2",
        "select 1; copy (select 1) to 'x.csv'",
        "export database '/tmp/x'",
        "call pragma_version()",
    ],
)
def test_anything_but_one_read_is_refused(filled: Path, sql: str) -> None:
    with pytest.raises(QueryRefused):
        query_frame(filled, sql, BOUNDS)


@pytest.mark.parametrize(
    ("sql", "named"),
    [
        ("install httpfs", "INSTALL"),
        ("-- fetch it\n force install httpfs", "FORCE INSTALL"),
        ("/* a\n note */ -- and a line\n\tload httpfs", "LOAD"),
        ("load httpfs", "LOAD"),
        ("use memory", "USE"),
        ("checkpoint", "CHECKPOINT"),
        ("copy gpu_samples to 'x.csv'", "COPY"),
        ("pragma database_list", "PRAGMA"),
    ],
)
def test_refusal_names_the_statement_as_typed(filled: Path, sql: str, named: str) -> None:
    with pytest.raises(QueryRefused) as refused:
        query_frame(filled, sql, BOUNDS)
    assert str(refused.value) == f"only read queries (SELECT) are allowed, not {named}."


@pytest.mark.parametrize(
    "sql",
    [
        "select * from read_csv('/etc/passwd')",
        "select * from read_text('/etc/hostname')",
        "select * from read_parquet('/tmp/*.parquet')",
        "select * from glob('/etc/*')",
    ],
)
def test_files_outside_the_warehouse_are_refused(filled: Path, sql: str) -> None:
    with pytest.raises(duckdb.Error, match=r"(?i)permission|disabled"):
        query_frame(filled, sql, BOUNDS)


def test_connection_settings_are_locked(filled: Path) -> None:
    con = read_only_connection(filled)
    with pytest.raises(duckdb.Error):
        con.execute("SET enable_external_access = true")


def test_cli_sql_answers_and_refuses(filled: Path) -> None:
    ok = gpuwaste(
        "sql", "--data-dir", str(filled), "--format", "csv", "select count(*) as n from gpu_samples"
    )
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.split() == ["n", "4"]
    bad = gpuwaste("sql", "--data-dir", str(filled), "copy gpu_samples to '/tmp/x.csv'")
    assert bad.returncode == 1
    assert bad.stderr.startswith("gpuwaste: only read queries") and "Traceback" not in bad.stderr
    err = gpuwaste("sql", "--data-dir", str(filled), "select nope from gpu_samples")
    assert err.returncode == 1 and "query failed" in err.stderr and "nope" in err.stderr
    missing = gpuwaste("sql", "--data-dir", str(filled / "absent"), "select 1")
    assert missing.returncode == 1 and "no warehouse at" in missing.stderr
