"""Attacks on the read-only SQL surface (`gpuwaste sql`, the dashboard's SQL page) beyond
tests/test_sql_readonly.py: path traversal, symlinks, DuckDB's temp directory, environment
variables and settings, and every spelling of SET / RESET.

Each attack plants a secret (a file outside the warehouse, an environment variable) and checks
that the query is refused, or answers without the secret.
"""

from __future__ import annotations

import os
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
SECRET = "s3cr3t-Zq9-do-not-leak"
# `gpuwaste sql`'s path (bounded.query_frame), with bounds no query here comes near
BOUNDS = Bounds(memory_mib=1024, timeout_s=60)


@pytest.fixture
def wh(tmp_path: Path) -> Path:
    """A warehouse with one partition, and secrets planted around it."""
    d = tmp_path / "warehouse"
    w = Warehouse(d)
    rows = pl.DataFrame({"host": ["h"], "gpu": [0], "ts": [T0], "util": [1.0]})
    w.replace_window("gpu_samples", "c1", T0, T0 + timedelta(minutes=1), rows)
    refresh_catalog(d)
    pl.DataFrame({"secret": [SECRET]}).write_parquet(d / "outside.parquet")  # beside parquet/
    (tmp_path / "secret.txt").write_text(SECRET + "\n")
    pl.DataFrame({"host": [SECRET], "gpu": [9], "ts": [T0], "util": [9.0]}).write_parquet(
        tmp_path / "evil.parquet"
    )
    return d


def attempt(data_dir: Path, sql: str) -> str:
    """Run a query; 'refused' when refused before running, 'error' on a DuckDB error, else rows."""
    try:
        df = query_frame(data_dir, sql, BOUNDS)
        return repr(df.rows() if df is not None else None)
    except QueryRefused:
        return "refused"
    except duckdb.Error as exc:
        assert SECRET not in str(exc)
        return "error: " + str(exc)


def test_path_traversal_out_of_the_warehouse_is_refused(wh: Path) -> None:
    p = wh / "parquet"
    for sql in [
        f"select * from read_parquet('{p}/../outside.parquet')",
        f"select * from read_parquet('{p}/gpu_samples/../../outside.parquet')",
        f"select * from read_parquet('{p}/./../outside.parquet')",
        f"select * from read_parquet('{p}//..//outside.parquet')",
        "select * from read_parquet('../outside.parquet')",
        f"select * from read_parquet(['{p}/gpu_samples/**/*.parquet', '{wh}/outside.parquet'])",
        f"select * from read_csv('{wh.parent}/secret.txt')",
        f"from '{p}/../outside.parquet'",
        f"select * from glob('{p}/../*')",
        f"select * from parquet_metadata('{wh}/outside.parquet')",
    ]:
        out = attempt(wh, sql)
        assert SECRET not in out, sql
        assert out.startswith(("error: Permission Error", "refused")) or out == "[]", (sql, out)


def test_symlinks_inside_the_warehouse_do_not_lead_out(wh: Path) -> None:
    p = wh / "parquet"
    os.symlink(wh.parent / "secret.txt", p / "link.csv")
    os.symlink(wh.parent, p / "dirlink")
    part = next((p / "gpu_samples").glob("cluster=*/date=*"))
    os.symlink(wh.parent / "evil.parquet", part / "evil.parquet")  # a view would read it
    for sql in [
        f"select * from read_csv('{p}/link.csv')",
        f"select * from read_text('{p}/link.csv')",
        f"select * from read_csv('{p}/dirlink/secret.txt')",
        f"select * from read_parquet('{part}/evil.parquet')",
        "select host from gpu_samples",
        f"select * from glob('{p}/**')",
    ]:
        out = attempt(wh, sql)
        assert SECRET not in out, (sql, out)


def test_duckdb_temp_directory_in_the_working_directory_is_not_readable(
    wh: Path, tmp_path: Path
) -> None:
    # Found here: DuckDB adds its temp directory (default `<cwd>/.tmp`) to the allowed
    # directories, so `read_text('.tmp/...')` read files outside the warehouse. Fixed in
    # readonly.py (temp_directory inside the data directory).
    cwd = tmp_path / "cwd"
    (cwd / ".tmp").mkdir(parents=True)
    (cwd / ".tmp" / "notes.txt").write_text(SECRET)
    exe = Path(sys.executable).parent / "gpuwaste"
    for sql in [
        "select content from read_text('.tmp/notes.txt')",
        f"select content from read_text('{cwd}/.tmp/notes.txt')",
        "select * from glob('.tmp/*')",
    ]:
        res = subprocess.run(
            [str(exe), "sql", "--data-dir", str(wh), sql],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert SECRET not in res.stdout + res.stderr, sql
        assert "notes.txt" not in res.stdout, sql
    con = read_only_connection(wh)  # the product's queries never read settings: this one may
    allowed = con.sql("select current_setting('allowed_directories')").fetchall()[0][0]
    assert all(str(d).startswith(str(wh.resolve())) for d in allowed), allowed


def test_environment_and_settings_do_not_reveal_secrets(wh: Path) -> None:
    exe = Path(sys.executable).parent / "gpuwaste"
    env = {**os.environ, "GPUWASTE_TEST_TOKEN": SECRET, "AWS_SECRET_ACCESS_KEY": SECRET}
    for sql in [
        "select getenv('GPUWASTE_TEST_TOKEN')",
        "select current_setting('s3_secret_access_key')",
        "select current_setting('http_proxy_password')",
        "select * from duckdb_settings()",
        "select * from duckdb_secrets()",
        "select * from which_secret('s3://bucket/x', 's3')",
        "select * from read_text('/proc/self/environ')",
        "select * from read_csv('/proc/self/environ')",
    ]:
        res = subprocess.run(
            [str(exe), "sql", "--data-dir", str(wh), "--format", "csv", sql],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert SECRET not in res.stdout + res.stderr, sql
        assert "Traceback" not in res.stderr, sql


@pytest.mark.parametrize(
    "sql",
    [
        "SET enable_external_access = true",
        "SET GLOBAL enable_external_access = true",
        "SET SESSION enable_external_access = true",
        "SET LOCAL enable_external_access = true",
        "set allowed_directories = ['/']",
        "SET lock_configuration = false",
        "RESET enable_external_access",
        "RESET ALL",
        "/* harmless */ SET enable_external_access = true",
        "select 1; SET enable_external_access = true",
        "SET enable_external_access = true; select 1",
        "PRAGMA enable_external_access",
        "SET VARIABLE x = 1",
        "SET temp_directory = '/'",
        "USE memory",
        "CHECKPOINT",
        "DETACH memory",
        "CREATE SECRET s (TYPE s3, KEY_ID 'k', SECRET 'v')",
        "CREATE MACRO m() AS 1",
        "VACUUM",
        "EXPLAIN ANALYZE COPY (select 1) TO 'x.csv'",
    ],
)
def test_set_and_other_statements_are_refused(wh: Path, sql: str) -> None:
    with pytest.raises(QueryRefused):
        query_frame(wh, sql, BOUNDS)


def test_configuration_cannot_be_changed_even_past_the_statement_check(wh: Path) -> None:
    con = read_only_connection(wh)
    for sql in [
        "RESET enable_external_access",
        "RESET allowed_directories",
        "SET allowed_directories = ['/']",
        "SET temp_directory = '/'",
        "RESET lock_configuration",
    ]:
        with pytest.raises(duckdb.Error):
            con.execute(sql)
    with pytest.raises(duckdb.Error, match=r"(?i)permission"):
        con.sql("select * from read_text('/etc/hostname')").fetchall()


def test_select_shaped_escapes_are_refused(wh: Path) -> None:
    for sql in [
        "select * from query('copy (select 1) to ''x.csv''')",
        "select * from query_table('duckdb_secrets')",
        "select * from read_csv('http://127.0.0.1:1/x.csv')",
        "select * from read_parquet('s3://bucket/x.parquet')",
        "select * from sniff_csv('/etc/passwd')",
        "select * from read_blob('/etc/hostname')",
        "select * from read_json('/etc/passwd')",
        "select * from glob('/etc/*')",
        "with x as (select * from read_text('/etc/passwd')) select * from x",
    ]:
        out = attempt(wh, sql)
        assert out == "refused" or out.startswith("error: "), (sql, out)
        assert "root:" not in out


def test_csv_output_of_nested_and_variant_columns_is_text_not_a_traceback(wh: Path) -> None:
    # Found here: `gpuwaste sql --format csv "select * from duckdb_settings()"` ended in a polars
    # traceback (lists and DuckDB variants cannot be written as CSV). Fixed in render.py.
    exe = Path(sys.executable).parent / "gpuwaste"
    # (duckdb_settings(), whose value column is a variant, is refused now: see below)
    for sql in ["select [1, 2] as l, {'a': 1} as s, 'x' as t", "select 'x' as name, 42::variant"]:
        res = subprocess.run(
            [str(exe), "sql", "--data-dir", str(wh), "--format", "csv", sql],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    assert res.stdout.startswith("name,")


@pytest.mark.parametrize(
    "sql",
    [
        "select current_setting('temp_directory')",
        "select current_setting('allowed_directories')",
        "select current_setting('secret_directory')",
        "select * from duckdb_settings()",
        "select value from duckdb_settings() where name = 'temp_directory'",
        "FROM duckdb_settings()",
        "select system.main.current_setting('temp_directory')",
        "select \"CURRENT_SETTING\"('temp_directory')",
        "with s as (select current_setting('temp_directory') as t) select * from s",
        "select 1 where 'x' in (select current_setting('temp_directory'))",
        "select * from (select * from duckdb_settings()) where name like '%dir%'",
        "select * from query('select current_setting(''temp_directory'')')",
        "select * from query_table('duckdb_settings')",
    ],
)
def test_settings_that_name_folders_cannot_be_read(wh: Path, sql: str) -> None:
    # Found here: current_setting() and duckdb_settings() showed the warehouse's absolute path
    # (temp_directory, allowed_directories) and the home directory (secret_directory). Fixed in
    # readonly.py: functions that read settings are refused, the secrets folder is blank.
    with pytest.raises(QueryRefused, match="settings are hidden"):
        query_frame(wh, sql, BOUNDS)


def test_no_answer_or_error_names_the_home_or_the_warehouse(wh: Path) -> None:
    home = str(Path.home())
    for sql in ["select * from duckdb_secrets()", "select * from which_secret('s3://b/x', 's3')"]:
        out = attempt(wh, sql)
        assert home not in out and str(wh.resolve()) not in out, (sql, out)
    con = read_only_connection(wh)
    secrets = con.execute("select current_setting('secret_directory')").fetchall()[0][0]
    assert secrets == ""
