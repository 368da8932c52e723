"""Tables count different jobs (every job, those that held a GPU, those that started): every
table the command line prints with a `jobs` column says under it which jobs it counts, beside
every job of the cluster and those that never held a GPU (issue #46: 259 in one table, 260 in
another, without a word).

On the demo warehouse: its Slurm cluster `demo` has 260 jobs and its Philly cluster 227, each
with one job that never held a GPU (a job cancelled as it started, a Philly job that never ran),
so a table of the jobs that held a GPU counts one job less than a table of every job.
"""

from __future__ import annotations

import io
from pathlib import Path

import duckdb
import polars as pl
import pytest
from typer.testing import CliRunner

from gpuwaste.analyses.registry import ANALYSES, BY_NAME
from gpuwaste.analyses.report import REPORTS
from gpuwaste.cli import app
from gpuwaste.render import OutputFormat, render
from gpuwaste.warehouse.results import ALL_MODELS, ALL_VCS, RESULT_TABLES

COUNTING = [n for n in REPORTS if n in RESULT_TABLES and "jobs" in RESULT_TABLES[n].columns]
TOTALS = "jobs per cluster: demo 260 (1 never held a GPU), philly-sample 227 (1 never held a GPU)"


def shown(*args: str) -> str:
    res = CliRunner().invoke(app, list(args), env={"COLUMNS": "400", "NO_COLOR": "1"})
    assert res.exit_code == 0, (args, res.output, res.exception)
    return res.stdout


def total_row(data_dir: Path, name: str, cluster: str, **rollup: str) -> int:
    """The jobs of `name`'s rows that roll every VC and GPU model up, and each `rollup` column
    (a table whose other column parts the jobs, jobs_by_status's state, is given none: summed)."""
    where = "".join(f" and {c} = '{v}'" for c, v in rollup.items())
    con = duckdb.connect(str(data_dir / "gpuwaste.duckdb"), read_only=True)
    try:
        row = con.execute(
            f"select sum(jobs), count(*) from {name} "
            f"where cluster = ? and vc = ? and gpu_model = ?{where}",
            [cluster, ALL_VCS, ALL_MODELS],
        ).fetchone()
    finally:
        con.close()
    assert row is not None and row[1] >= 1, (name, row)
    return int(row[0])


def test_every_table_counting_jobs_declares_which() -> None:
    counting = {a.name for a in ANALYSES if "jobs" in a.table.columns}
    assert counting and counting <= set(COUNTING)
    assert [n for n in counting if not BY_NAME[n].jobs] == []
    # and only those: words under a table without a jobs column would speak of nothing
    assert [a.name for a in ANALYSES if a.jobs and a.name not in counting] == []


@pytest.mark.parametrize("name", COUNTING)
def test_each_report_says_which_jobs_it_counts(demo_warehouse: Path, name: str) -> None:
    out = shown("report", name, "--data-dir", str(demo_warehouse))
    assert f"Jobs counts {BY_NAME[name].jobs}; {TOTALS}." in " ".join(out.split()), out
    csv = shown("report", name, "--data-dir", str(demo_warehouse), "--format", "csv")
    assert "Jobs counts" not in csv  # CSV is for scripts: the frame only


def test_the_words_are_true_on_the_demo(demo_warehouse: Path) -> None:
    """The tables that say they count every job count 260 / 227; those of the jobs that held a
    GPU one less: the numbers of the note explain the difference."""
    for cluster, every in (("demo", 260), ("philly-sample", 227)):
        assert total_row(demo_warehouse, "waste_by_vc", cluster, kind="total") == every
        assert total_row(demo_warehouse, "jobs_by_status", cluster) == every
        assert total_row(demo_warehouse, "waste_by_model", cluster) == every - 1
        assert total_row(demo_warehouse, "failure_retries", cluster, size_class="all") == every - 1
        assert total_row(demo_warehouse, "never_used_by_size", cluster, gpus_requested="all") == (
            every - 1
        )


def test_one_cluster_one_vc_and_the_other_tables(demo_warehouse: Path) -> None:
    d = str(demo_warehouse)
    one = " ".join(shown("report", "jobs_by_status", "--data-dir", d, "--vc", "rl").split())
    assert "cluster demo has 31 jobs in VC rl, 1 of which never held a GPU." in one, one
    by = " ".join(shown("report", "--by", "model", "--data-dir", d, "--cluster", "demo").split())
    assert "Jobs counts the jobs with GPU time; cluster demo has 260 jobs, 1 of which" in by, by
    since = " ".join(
        shown("report", "--by", "vc", "--data-dir", d, "--since", "2020-01-01").split()
    )
    assert "Jobs counts the jobs with GPU time in the period." in since, since
    replay = shown("policy", "replay", "--idle-hours", "1", "--data-dir", d, "--cluster", "demo")
    assert "Jobs counts the jobs that started and held GPU time; cluster demo has 260 jobs" in (
        " ".join(replay.split())
    )
    listed = shown("policy", "replay", "--idle-hours", "1", "--data-dir", d, "--jobs")
    assert "Jobs counts" not in listed  # a list of the jobs hit has no count to explain


def test_render_prints_the_notes_under_a_table_only() -> None:
    df = pl.DataFrame({"vc": ["a"], "jobs": [3]})
    out = io.StringIO()
    render(df, title="T", notes=["Jobs counts some."], out=out, width=80)
    lines = out.getvalue().splitlines()
    assert lines[-1] == "Jobs counts some." and lines[-2].startswith("└"), lines
    for fmt in (OutputFormat.csv, OutputFormat.json):
        out = io.StringIO()
        render(df, fmt, notes=["Jobs counts some."], out=out)
        assert "Jobs counts" not in out.getvalue()
    out = io.StringIO()
    render(df.clear(), title="T", notes=["Jobs counts some."], out=out)
    assert out.getvalue() == "No rows in 'T'.\n"
