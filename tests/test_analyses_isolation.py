"""One bad job or cluster never stops the analysis of the others (issue 16, item 2).

Real captured sacct files (tests/fixtures/sacct) hold jobs that never started: cancelled while
pending, or listed without any time at all. They count for status and queueing only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pytest
from typer.testing import CliRunner

from gpuwaste.analyses.freshness import freshness
from gpuwaste.analyses.per_job import BatchResult
from gpuwaste.cli import app
from gpuwaste.warehouse.store import Warehouse
from tests.conftest import FIXTURES
from tests.support.two_jobs import write_two_jobs

TOIL = FIXTURES / "sacct" / "toil_astron_2021_P_noheader.txt"
PRINCETON = FIXTURES / "sacct" / "reportseff_princeton_cancelled_no_newline.txt"
PRINCETON_COLUMNS = "AllocCPUS,Elapsed,JobID,JobIDRaw,MaxRSS,NNodes,ReqMem,State,Timelimit,TotalCPU"
PER_JOB = ("job_usage", "job_gpu_usage", "idle_slots", "stable_phases", "job_util_hist")
SUMMARIES = ("waste_by_vc", "never_used_by_size", "jobs_by_status", "queueing_delay", "waste_daily")


def invoke(*args: str) -> tuple[int, str, str]:
    """Exit code, stdout, and stderr with the operator's error (the CLI prints it there)."""
    out = CliRunner().invoke(app, list(args))
    error = f"{out.exception}\n" if out.exception else ""
    return out.exit_code, out.stdout, out.stderr + error


def ingest_unstarted(data_dir: Path, cluster: str) -> None:
    for path, columns in ((TOIL, "JobIDRaw,State,ExitCode"), (PRINCETON, PRINCETON_COLUMNS)):
        code, _, err = invoke(
            "ingest", "slurm", "--file", str(path), "--columns", columns,
            "--cluster", cluster, "--data-dir", str(data_dir),
        )  # fmt: skip
        assert code == 0, err


def results(data_dir: Path, cluster: str, name: str) -> pl.DataFrame:
    df = Warehouse(data_dir).read(name, cluster).drop("cluster")
    return df.sort(df.columns, nulls_last=True)


def test_unstarted_jobs_count_for_status_and_queueing_only(tmp_path: Path) -> None:
    alone = tmp_path / "alone"
    write_two_jobs(alone, "good")
    assert invoke("analyze", "--data-dir", str(alone))[0] == 0

    both = tmp_path / "both"
    write_two_jobs(both, "good")
    write_two_jobs(both, "mixed")
    ingest_unstarted(both, "mixed")
    code, out, err = invoke("analyze", "--data-dir", str(both))
    assert code == 0, err
    assert "mixed: 11 of 11 jobs recomputed" in out

    # the other cluster: exactly what it gives when analyzed alone
    for name in PER_JOB + SUMMARIES:
        assert results(both, "good", name).equals(results(alone, "good", name)), name
    # the good jobs of the mixed cluster: the same rows as in the good cluster
    for name in PER_JOB:
        mixed = results(both, "mixed", name)
        if "job_id" in mixed.columns:
            mixed = mixed.filter(pl.col("job_id").is_in(["a", "b"]))
        assert mixed.equals(results(both, "good", name)), name

    usage = results(both, "mixed", "job_usage")
    unstarted = usage.filter(~pl.col("job_id").is_in(["a", "b"]))
    assert unstarted.height == 9  # 8 from toil, 1 cancelled at Princeton
    assert unstarted["start_ts"].is_null().all() and unstarted["queue_delay_s"].is_null().all()
    assert (unstarted["gpu_s"].fill_null(0) == 0).all()
    assert results(both, "mixed", "job_gpu_usage")["job_id"].sort().to_list() == ["a", "b"]

    status = results(both, "mixed", "jobs_by_status").filter(
        (pl.col("vc") == "(all)") & (pl.col("gpu_model") == "(all)")
    )
    jobs = dict(zip(status["state"], status["jobs"], strict=True))
    assert jobs == {"passed": 2, "killed": 2, "unsuccessful": 6, "running": 1}
    gpu_s = dict(zip(status["state"], status["gpu_s"], strict=True))
    assert gpu_s["killed"] == 1200 and gpu_s["passed"] == 1200  # b, a: 20 min on one GPU
    delay = results(both, "mixed", "queueing_delay").filter(pl.col("size_class") == "all")
    assert set(delay["jobs"].to_list()) == {2, 1}  # (all): a and b; per VC: one each
    assert delay.equals(
        results(both, "good", "queueing_delay").filter(pl.col("size_class") == "all")
    )


def test_a_cluster_that_cannot_be_analyzed_does_not_stop_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Any unforeseen failure of one cluster's analysis (simulated: a summary raises for
    cluster 'broken' only): one line naming it, the other cluster is analyzed completely, the
    exit status is non-zero, and the traceback is kept in the cluster's error log."""
    from gpuwaste.analyses import run as run_module

    alone = tmp_path / "alone"
    write_two_jobs(alone, "good")
    assert invoke("analyze", "--data-dir", str(alone))[0] == 0

    real = run_module.SUMMARIES["debug_jobs"]

    def failing(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
        if con.execute("select getvariable('cluster')").fetchall()[0][0] == "broken":
            raise RuntimeError("division by zero in debug_jobs")
        return real(con)

    both = tmp_path / "both"
    write_two_jobs(both, "broken")
    write_two_jobs(both, "good")
    monkeypatch.setitem(run_module.SUMMARIES, "debug_jobs", failing)
    code, out, err = invoke("analyze", "--data-dir", str(both))
    assert code == 1
    assert "good: 2 of 2 jobs recomputed" in out
    log = both / "analyze_state" / "broken.errors.log"
    assert (
        f"broken: analysis failed: RuntimeError: division by zero in debug_jobs (details: {log})"
    ) in err
    assert (
        "the analysis of cluster(s) broken failed (see the lines above and "
        "analyze_state/<cluster>.errors.log); everything else is up to date (clusters analyzed: "
        "good)."
    ) in err
    assert "Traceback" not in err and "Traceback" in log.read_text()
    for name in PER_JOB + SUMMARIES:
        assert results(both, "good", name).equals(results(alone, "good", name)), name
    assert freshness(both).filter(pl.col("cluster") == "broken")["stale"].all()

    monkeypatch.setitem(run_module.SUMMARIES, "debug_jobs", real)
    assert invoke("analyze", "--data-dir", str(both))[0] == 0
    assert not log.exists()
    assert not freshness(both)["stale"].any()


@pytest.mark.parametrize("bad", ["a", "b"])
def test_a_job_whose_analysis_raises_is_left_out_alone(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch, bad: str
) -> None:
    """Any unforeseen failure of one job's analysis (simulated: the per-job pass raises for
    one job id) leaves out that job only, says so, exits non-zero, and retries it next run."""
    from gpuwaste.analyses import batch as batch_module

    real = batch_module.run_batch

    def failing(
        con: duckdb.DuckDBPyConnection, cluster: str, ids: list[str], *args: Any, **kwargs: Any
    ) -> BatchResult:
        if bad in ids:
            raise ValueError(f"cannot analyze {bad}\nsecond line")
        return real(con, cluster, ids, *args, **kwargs)

    write_two_jobs(data_dir, "c")
    write_two_jobs(data_dir, "d")
    monkeypatch.setattr(batch_module, "run_batch", failing)
    code, out, err = invoke("analyze", "--data-dir", str(data_dir))
    assert code == 1
    assert (
        f"c: 2 of 2 jobs recomputed (rebuilt), 0 removed; 1 job(s) left out because their "
        f"analysis failed (job {bad}: ValueError: cannot analyze {bad}; details: "
    ) in out
    assert "some jobs of c, d could not be analyzed" in err
    good = "b" if bad == "a" else "a"
    for cluster in ("c", "d"):
        assert results(data_dir, cluster, "job_usage")["job_id"].to_list() == [good]

    monkeypatch.setattr(batch_module, "run_batch", real)
    code, out, err = invoke("analyze", "--data-dir", str(data_dir))
    assert code == 0, err
    assert "c: 1 of 2 jobs recomputed (incremental)" in out
    assert results(data_dir, "c", "job_usage")["job_id"].sort().to_list() == ["a", "b"]
