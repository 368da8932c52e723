"""The Spark engine's pure parts, without a JVM: the flags, the endpoints of a master URL, the
version check, and Spark's failures said in one sentence (pyspark's own error text)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuwaste.analyses.engines.spark import endpoints, explain_failure, version_mismatch
from gpuwaste.cli import app
from tests.conftest import REPO
from tests.support.two_jobs import write_two_jobs


def invoke(*args: str) -> tuple[int, str]:
    out = CliRunner().invoke(app, list(args))
    return out.exit_code, out.stderr + (f"{out.exception}" if out.exception else "")


@pytest.mark.parametrize(
    ("url", "want"),
    [
        ("spark://head:7077", [("head", 7077)]),
        ("spark://a:7077,b:7078", [("a", 7077), ("b", 7078)]),
        ("spark://head", [("head", 7077)]),
        ("sc://gw:15002/;token=x", [("gw", 15002)]),
        ("sc://gw", [("gw", 15002)]),
        ("k8s://https://api.example:6443", [("api.example", 6443)]),
        ("k8s://api.example:6443", [("api.example", 6443)]),
        ("local[2]", []),
        ("yarn", []),
    ],
)
def test_the_endpoints_a_master_url_names(url: str, want: list[tuple[str, int]]) -> None:
    assert endpoints(url) == want


def test_a_version_mismatch_names_each_difference() -> None:
    driver = {"Python": "3.11", "pyspark": "4.3.0", "gpuwaste": "0.1.0"}
    assert version_mismatch(driver, dict(driver)) == ""
    assert version_mismatch(driver, {**driver, "pyspark": "4.0.1"}) == (
        "pyspark 4.0.1 (the driver: 4.3.0)"
    )
    assert version_mismatch(driver, {"Python": "3.12", "pyspark": "4.3.0"}) == (
        "Python 3.12 (the driver: 3.11), gpuwaste none (the driver: 0.1.0)"
    )


def test_pysparks_python_mismatch_is_one_sentence() -> None:
    """The text pyspark's worker raises when its Python is not the driver's (pyspark: a dev
    dependency, so missing it fails)."""
    from pyspark.errors import PySparkRuntimeError

    text = str(
        PySparkRuntimeError(
            errorClass="PYTHON_VERSION_MISMATCH",
            messageParameters={"worker_version": "3.12", "driver_version": "3.11"},
        )
    )
    assert explain_failure(f"Job aborted.\n{text}", "spark://h:7077") == (
        "the Spark executors at spark://h:7077 run Python 3.12, the driver Python 3.11: run the "
        "same Python (and pyspark and gpuwaste) on every worker (PYSPARK_PYTHON)."
    )


def test_another_failure_keeps_its_python_exception_line() -> None:
    text = (
        "An error occurred while calling o51.collectToPython.\n"
        "Traceback (most recent call last):\n  File 'x.py', line 1\n"
        "OSError: [Errno 28] No space left on device\n\tat org.apache.spark.Foo"
    )
    assert explain_failure(text, "spark://h:7077") == (
        "the Spark job of gpuwaste analyze at spark://h:7077 failed: "
        "OSError: [Errno 28] No space left on device"
    )


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--spark-master", "spark://h:7077"], "--spark-master is for --engine spark"),
        (["--spark-remote", "sc://h"], "--spark-remote is for --engine spark"),
        (
            ["--engine", "spark", "--spark-master", "spark://h:7077", "--spark-remote", "sc://h"],
            "give either --spark-master or --spark-remote, not both.",
        ),
        (
            ["--engine", "spark", "--spark-remote", "sc://h:15002/;token=s3cret"],
            "--spark-remote must not carry a token (a command line is visible to every user of "
            "the machine): put it in the environment variable SPARK_CONNECT_AUTHENTICATE_TOKEN.",
        ),
    ],
)
def test_spark_flags_without_the_spark_engine_are_one_sentence(
    tmp_path: Path, args: list[str], said: str
) -> None:
    write_two_jobs(tmp_path, "c")
    code, err = invoke("analyze", "--data-dir", str(tmp_path), *args)
    assert code == 1 and said in err and "Traceback" not in err and "s3cret" not in err
    assert not (tmp_path / "parquet" / "job_usage").exists()


@pytest.mark.parametrize(
    ("shell", "script"),
    [
        ("bash", "slurm/gpuwaste-analyze.sbatch"),
        ("sh", "submit-standalone.sh"),
        ("sh", "kubernetes/submit-k8s.sh"),
    ],
)
def test_the_deploy_scripts_parse(shell: str, script: str) -> None:
    """The shell of each deploy/spark script reads it without a syntax error (the Slurm and
    Kubernetes ones cannot run here; spark-submit's entry point runs in tests/test_spark.py)."""
    path = REPO / "deploy" / "spark" / script
    out = subprocess.run([shell, "-n", str(path)], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert "--engine spark" in path.read_text()
