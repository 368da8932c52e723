"""warehouse.reading.read_frame builds a frame either through Arrow or, in a command that has
not loaded pyarrow (`gpuwaste job`), from Python rows. Both ways must give the same frame: same
columns, dtypes (time zones included), values and NULLs, on every table the warehouse has."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness.result_warehouse import Built, build_result_warehouse
from polars.testing import assert_frame_equal

from gpuwaste.warehouse.catalog import all_tables
from gpuwaste.warehouse.reading import frame_from_arrow, frame_from_rows, row_schema
from gpuwaste.warehouse.readonly import read_only_connection
from tests.support.interpreter import fresh_python

# The tables `gpuwaste job` reads must take the row path, or it loads pyarrow after all.
JOB_TABLES = ("job_usage", "job_gpu_usage", "idle_slots", "stable_phases", "gpu_samples")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return build_result_warehouse(tmp_path_factory.mktemp("wh") / "data", n_jobs=300, seed=4)


def both_ways(data_dir: Path, sql: str) -> int:
    """Compare the two ways on `sql`; how many rows it gave (-1: not readable by rows)."""
    con = read_only_connection(data_dir)
    try:
        schema = row_schema(con.sql(sql))
        if schema is None:
            return -1
        by_rows = frame_from_rows(con.sql(sql), schema)
        assert_frame_equal(by_rows, frame_from_arrow(con.sql(sql)))
        return by_rows.height
    finally:
        con.close()


def test_every_table_reads_the_same_both_ways(built: Built) -> None:
    row_readable = {t: both_ways(built.data_dir, f"SELECT * FROM {t}") for t in all_tables()}
    assert [t for t in JOB_TABLES if row_readable.get(t, -1) <= 0] == []


def test_nulls_empty_results_and_computed_columns_read_the_same(built: Built) -> None:
    queries = [
        "SELECT * FROM job_usage WHERE false",  # no rows: the dtypes still match
        "SELECT NULL::DOUBLE AS x, NULL::VARCHAR AS s, NULL::TIMESTAMPTZ AS t",
        "SELECT [NULL, 'a']::VARCHAR[] AS l, []::VARCHAR[] AS e, NULL::VARCHAR[] AS n",
        "SELECT job_id, end_ts, diagnoses, lost_cost FROM job_usage ORDER BY end_ts NULLS FIRST",
        "SELECT min(start_ts)::DATE AS d, count(*)::BIGINT AS n, avg(gpu_s) AS g FROM job_usage",
        "SELECT TIMESTAMP '2026-03-29 01:30:00' AS naive, 1::TINYINT AS i8, 2.5::FLOAT AS f",
    ]
    rows = [both_ways(built.data_dir, q) for q in queries]
    assert rows[:3] == [0, 1, 1] and min(rows[3:]) > 0


def test_a_type_without_a_row_dtype_goes_through_arrow(built: Built) -> None:
    assert (
        both_ways(built.data_dir, "SELECT sum(gpus) AS h, INTERVAL 1 HOUR AS i FROM job_usage")
        == -1
    )


def gpuwaste_job(built: Built, preload: str) -> tuple[str, bool]:
    """`gpuwaste job` of a drill-down job in a fresh interpreter after `preload`: its output and
    whether pyarrow was loaded."""
    code = (
        f"import sys; {preload}\n"
        "from gpuwaste.cli import main\n"
        f"sys.argv = ['gpuwaste', 'job', {built.drill_jobs[0]!r}, '--data-dir', "
        f"{str(built.data_dir)!r}, '--format', 'json']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print('PYARROW' if 'pyarrow' in sys.modules else 'NO PYARROW')\n"
    )
    out, _, last = fresh_python(code).rstrip("\n").rpartition("\n")
    return out, last == "PYARROW"


def test_gpuwaste_job_prints_the_same_report_without_pyarrow(built: Built) -> None:
    without, loaded = gpuwaste_job(built, "")
    with_arrow, loaded_after_preload = gpuwaste_job(built, "import pyarrow")
    assert (loaded, loaded_after_preload) == (False, True)
    assert '"gpus"' in without and without == with_arrow
