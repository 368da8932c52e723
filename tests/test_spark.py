"""`gpuwaste analyze --engine spark` on a real Spark standalone cluster (a master and two workers
on loopback, bench/harness/spark.py): the same tables as the local engine row for row, a worker
SIGKILLed mid-run changes nothing, and what goes wrong is said in one sentence with no result file
written. One Spark session for the whole test run."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from harness.components import free_port
from harness.spark import (
    REPO,
    StandaloneCluster,
    connect_server,
    session,
    spark_home,
    standalone_cluster,
)
from typer.testing import CliRunner

from gpuwaste.analyses.engines.spark import SparkEngine
from gpuwaste.analyses.run import analyze
from gpuwaste.cli import app
from gpuwaste.config import Settings

pytestmark = [pytest.mark.slow, pytest.mark.spark]

GENERATED = ("--seed", "11", "--gpus", "16", "--days", "4", "--cluster", "gen")
BATCH_DAYS = 1  # one batch per day of job starts: several tasks per run


def invoke(*args: str) -> tuple[int, str, str]:
    out = CliRunner().invoke(app, list(args))
    error = f"{out.exception}\n" if out.exception else ""
    return out.exit_code, out.stdout, out.stderr + error


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[StandaloneCluster, Any]]:
    """The standalone cluster and the run's one Spark session on it."""
    with standalone_cluster(tmp_path_factory.mktemp("spark"), workers=2) as c:
        spark = session(c.url)
        try:
            yield c, spark
        finally:
            spark.stop()


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A generated cluster, ingested (not analyzed): copy it before use."""
    base = tmp_path_factory.mktemp("generated")
    src, data = base / "src", base / "warehouse"
    assert invoke("generate", "--out", str(src), *GENERATED)[0] == 0
    for source, path in (("openmetrics", "metrics.om"), ("slurm", "sacct.txt")):
        code, _, err = invoke(
            "ingest", source, "--file", str(src / path), "--cluster", "gen",
            "--data-dir", str(data),
        )  # fmt: skip
        assert code == 0, err
    return data


def copy(warehouse: Path, dest: Path) -> Path:
    shutil.copytree(warehouse, dest)
    return dest


def result_files(data_dir: Path) -> dict[str, pl.DataFrame]:
    """Every result file analyze wrote, as stored (rows in file order)."""
    facts = {"gpu_samples", "host_samples", "jobs", "job_gpus", "ingest_state", "quarantine"}
    return {
        str(p.relative_to(data_dir)): pl.read_parquet(p, hive_partitioning=False)
        for p in sorted((data_dir / "parquet").glob("*/cluster=*/analyze.parquet"))
        if p.parts[-3] not in facts
    }


def assert_same_tables(have: Path, want: Path) -> None:
    a, b = result_files(have), result_files(want)
    assert sorted(a) == sorted(b)
    assert len(a) >= 10
    for name in a:
        assert a[name].schema == b[name].schema, name
        assert a[name].equals(b[name]), name  # row for row, in stored order


@pytest.fixture(scope="module")
def local_result(warehouse: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = copy(warehouse, tmp_path_factory.mktemp("local") / "warehouse")
    analyze(Settings(data_dir=data), batch_days=BATCH_DAYS, quiet=True)
    return data


def test_the_cluster_gives_the_local_tables_row_for_row(
    cluster: tuple[StandaloneCluster, Any], warehouse: Path, local_result: Path, tmp_path: Path
) -> None:
    c, _ = cluster
    data = copy(warehouse, tmp_path / "warehouse")
    engine = SparkEngine(master=c.url)
    [run] = analyze(Settings(data_dir=data), batch_days=BATCH_DAYS, quiet=True, engine=engine)
    assert run.jobs_recomputed == run.jobs_total > 300 and not run.failed_jobs
    assert_same_tables(data, local_result)
    assert not (data / "analyze_state" / "staging" / "gen").exists()
    # again: nothing changed, nothing recomputed, the same tables (idempotent)
    [again] = analyze(Settings(data_dir=data), batch_days=BATCH_DAYS, quiet=True, engine=engine)
    assert again.jobs_recomputed == 0
    assert_same_tables(data, local_result)


def test_a_worker_killed_mid_run_changes_nothing(
    cluster: tuple[StandaloneCluster, Any], warehouse: Path, local_result: Path, tmp_path: Path
) -> None:
    """SIGKILL one worker (and its executor) as soon as the first batch is staged; Spark runs
    its tasks again on the other worker and the tables come out identical."""
    c, spark = cluster
    data = copy(warehouse, tmp_path / "warehouse")
    staging = data / "analyze_state" / "staging" / "gen" / "job_usage"
    killed: list[float] = []

    def kill_after_first_batch() -> None:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not killed:
            if staging.is_dir() and any(staging.glob("batch-*.parquet")):
                c.kill_worker(1)
                killed.append(time.monotonic())
            time.sleep(0.05)

    killer = threading.Thread(target=kill_after_first_batch, daemon=True)
    killer.start()
    try:
        [run] = analyze(
            Settings(data_dir=data),
            batch_days=BATCH_DAYS,
            quiet=True,
            engine=SparkEngine(master=c.url),
        )
        finished = time.monotonic()
        killer.join(timeout=5)
        assert killed and killed[0] < finished, "the worker was not killed during the run"
        assert c.workers[1].poll() is not None
        assert lost_tasks(spark) >= 1, "no task of the killed worker was running"
        assert not run.failed_jobs
        assert_same_tables(data, local_result)
    finally:
        c.add_worker()  # the other tests get two workers again
        c.wait_for_workers(2)


def lost_tasks(spark: Any) -> int:
    """Failed task attempts of the last Spark job (a task lost with its executor is one)."""
    tracker = spark.sparkContext.statusTracker()
    job = tracker.getJobInfo(max(tracker.getJobIdsForGroup()))
    stages = [tracker.getStageInfo(s) for s in job.stageIds]
    return sum(s.numFailedTasks for s in stages if s is not None)


def test_an_unreachable_master_is_one_sentence_and_writes_nothing(
    warehouse: Path, tmp_path: Path
) -> None:
    data = copy(warehouse, tmp_path / "warehouse")
    url = f"spark://127.0.0.1:{free_port()}"
    code, _, err = invoke(
        "analyze", "--data-dir", str(data), "--engine", "spark", "--spark-master", url
    )
    assert code == 1
    assert f"gen: analysis failed: cannot reach the Spark master at {url} (127.0.0.1:" in err
    assert "Connection refused" in err and "Traceback" not in err
    assert result_files(data) == {}


def test_a_worker_that_cannot_see_the_warehouse_is_one_sentence_and_writes_nothing(
    cluster: tuple[StandaloneCluster, Any],
    warehouse: Path,
    local_result: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The data directory given as /proc/self/cwd/warehouse: the driver (its working folder
    here) sees the warehouse, every executor (working in its Spark work folder) sees nothing
    there. The tables analyzed before stay as they were."""
    c, _ = cluster
    data = copy(local_result, tmp_path / "warehouse")
    (data / "analyze_state").joinpath("gen.json").unlink()  # the next run recomputes everything
    monkeypatch.chdir(tmp_path)
    seen_by_driver = "/proc/self/cwd/warehouse"
    code, _, err = invoke(
        "analyze", "--data-dir", seen_by_driver, "--batch-days", str(BATCH_DAYS),
        "--engine", "spark", "--spark-master", c.url,
    )  # fmt: skip
    assert code == 1
    assert (
        f"gen: analysis failed: the Spark executor on {socket.gethostname()} cannot see the "
        f"warehouse at {seen_by_driver}: every worker must see the data directory at the "
        "driver's path"
    ) in err
    assert "Traceback" not in err
    assert_same_tables(data, local_result)
    assert not (data / "analyze_state" / "staging" / "gen").exists()


def test_executors_without_gpuwaste_are_one_sentence(warehouse: Path, tmp_path: Path) -> None:
    """Executors running another Python (the system's, without gpuwaste and pyspark, or of
    another version): one sentence naming what to install where; no result file."""
    other = shutil.which("python3", path="/usr/bin:/bin")
    if other is None or Path(other).resolve() == Path(sys.executable).resolve():
        pytest.fail("no system python3 besides the test's virtualenv")
    data = copy(warehouse, tmp_path / "warehouse")
    env = {**os.environ, "PYSPARK_PYTHON": other, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [
            str(Path(sys.executable).with_name("gpuwaste")), "analyze", "--data-dir", str(data),
            "--engine", "spark", "--spark-master", "local[1]",
        ],
        capture_output=True, text=True, env=env, timeout=600, check=False,
    )  # fmt: skip
    assert out.returncode == 1
    last = [line for line in out.stderr.splitlines() if line.startswith("gen: ")]
    assert last, out.stderr[-2000:]
    assert last[0].startswith("gen: analysis failed: the Spark executors at local[1] ")
    assert "install gpuwaste" in last[0] or "run the same Python" in last[0]
    assert result_files(data) == {}


def run_cli(
    args: list[str], timeout: int = 600, **extra_env: str
) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        **extra_env,
        "PYTHONPATH": str(REPO),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,  # as deploy/spark/submit-standalone.sh sets it
    }
    return subprocess.run(
        args, capture_output=True, text=True, env=env, timeout=timeout, check=False
    )


def test_spark_submit_runs_the_deploy_entry_point(
    warehouse: Path, local_result: Path, tmp_path: Path
) -> None:
    """deploy/spark/gpuwaste_analyze.py through pyspark's own spark-submit: `--engine spark`
    without --spark-master takes spark-submit's master; the local engine's tables."""
    data = copy(warehouse, tmp_path / "warehouse")
    submit = spark_home() / "bin" / "spark-submit"
    out = run_cli(
        [
            str(submit), "--master", "local[2]", "--conf", "spark.ui.enabled=false",
            str(REPO / "deploy" / "spark" / "gpuwaste_analyze.py"),
            "analyze", "--engine", "spark", "--data-dir", str(data),
            "--batch-days", str(BATCH_DAYS), "--quiet",
        ]
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert_same_tables(data, local_result)


def test_spark_connect_gives_the_local_tables(
    warehouse: Path, local_result: Path, tmp_path: Path
) -> None:
    """--spark-remote sc://HOST:PORT: the batches run on a Spark Connect server's executors."""
    data = copy(warehouse, tmp_path / "warehouse")
    with connect_server(tmp_path / "connect") as url:
        out = run_cli(
            [
                str(Path(sys.executable).with_name("gpuwaste")), "analyze", "--engine", "spark",
                "--spark-remote", url, "--data-dir", str(data), "--batch-days", str(BATCH_DAYS),
            ]
        )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert "gen: " in out.stdout and "jobs recomputed (rebuilt)" in out.stdout
    assert_same_tables(data, local_result)


def test_no_java_is_one_sentence(warehouse: Path, tmp_path: Path) -> None:
    """JAVA_HOME naming a folder without Java: Spark's JVM cannot start; one sentence."""
    data = copy(warehouse, tmp_path / "warehouse")
    out = run_cli(
        [
            str(Path(sys.executable).with_name("gpuwaste")), "analyze", "--engine", "spark",
            "--spark-master", "local[1]", "--data-dir", str(data),
        ],
        JAVA_HOME=str(tmp_path / "no-java"),
    )  # fmt: skip
    assert out.returncode == 1
    assert (
        "gen: analysis failed: could not start Spark's JVM: install Java 17 or later (Debian: "
        "openjdk-17-jre-headless) or set JAVA_HOME."
    ) in out.stderr
    assert "Traceback" not in out.stderr
    assert result_files(data) == {}
