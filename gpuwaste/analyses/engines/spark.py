"""`gpuwaste analyze --engine spark`: the batches of one cluster as the tasks of one Spark job.

The driver's plan (batch -> job ids, `plan.make_plan`) is in the run's staging folder; it runs
`spark.range(n, numPartitions=n).mapInArrow(...)`: one task per batch. On the executor a task
reads its job ids from the plan, calls `batch.stage_batch` (the same function the local engine
calls) and writes its rows into the staging folder; what it returns to the driver is one small
JSON outcome. The driver never holds result rows: it commits the staged files (`staging.commit`).

Executors read the warehouse and write the staging files at the driver's path, so every worker
must see the data directory at the same path (a shared filesystem, or a ReadWriteMany volume on
Kubernetes). A task that dies (its executor killed) is retried by Spark; a retry rewrites the same
staged files with the same rows, atomically.
"""

from __future__ import annotations

import functools
import os
import re
import socket
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa

import gpuwaste
from gpuwaste.analyses.batch import (
    BatchOutcome,
    BatchPlan,
    BatchSpec,
    planned_spec,
    spec_fields,
    stage_batch,
)
from gpuwaste.errors import GpuwasteError
from gpuwaste.process import ALLOCATOR_ENV, allocator_conf, fix_mmap_threshold

OUTCOME_SCHEMA = "batch long, outcome string"
APP_NAME = "gpuwaste analyze"
CONNECT_PORT = 15002  # Spark Connect's default port


class SparkEngineError(GpuwasteError):
    """Spark could not run the analysis; the message says where and why in one sentence."""


def versions() -> dict[str, str]:
    """The versions a driver and its executors must share."""
    import pyspark

    return {
        "Python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "pyspark": pyspark.__version__,
        "gpuwaste": gpuwaste.__version__,
    }


def version_mismatch(driver: dict[str, str], executor: dict[str, str]) -> str:
    """'' when the executor runs the driver's versions, else what differs, as a phrase."""
    diffs = [
        f"{name} {executor.get(name, 'none')} (the driver: {want})"
        for name, want in driver.items()
        if executor.get(name) != want
    ]
    return ", ".join(diffs)


def endpoints(url: str) -> list[tuple[str, int]]:
    """The (host, port) pairs a Spark master or Spark Connect URL names; [] for local, yarn."""
    if url.startswith("spark://"):
        pairs = []
        for part in url.removeprefix("spark://").split(","):
            host, _, port = part.rpartition(":")
            pairs.append((host or part, int(port) if port.isdigit() else 7077))
        return pairs
    if url.startswith("k8s://"):
        url = url.removeprefix("k8s://")
        if "://" not in url:
            url = "https://" + url
    if url.startswith(("sc://", "http://", "https://")):
        split = urlsplit(url)
        default = CONNECT_PORT if split.scheme == "sc" else (443 if split.scheme == "https" else 80)
        return [(split.hostname or "localhost", split.port or default)]
    return []


def check_reachable(url: str, what: str, timeout: float = 5.0) -> None:
    """Raise one sentence when none of the endpoints `url` names accepts a TCP connection."""
    pairs = endpoints(url)
    errors = []
    for host, port in pairs:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return
        except OSError as exc:
            errors.append(f"{host}:{port}: {exc.strerror or exc}")
    if errors:
        raise SparkEngineError(
            f"cannot reach the {what} at {url} ({'; '.join(errors)}): start it, or give the "
            "URL it listens on."
        )


# Spark's failure text -> one sentence for the operator ({where}: the master or remote URL).
_PY_MISMATCH = re.compile(r"different version:? \(?([\d., ]+)\)? than that in driver:? ([\d.]+)")
_NO_MODULE = re.compile(r"No module named '([\w.]+)'")


def explain_failure(text: str, where: str) -> str:
    """One sentence for a Spark job that failed with the message `text`."""
    mismatch = _PY_MISMATCH.search(text)
    if mismatch:
        worker = mismatch.group(1).replace(" ", "").strip(",").replace(",", ".")
        return (
            f"the Spark executors at {where} run Python {worker}, the driver Python "
            f"{mismatch.group(2)}: run the same Python (and pyspark and gpuwaste) on every "
            "worker (PYSPARK_PYTHON)."
        )
    missing = _NO_MODULE.search(text)
    if missing:
        v = versions()
        return (
            f"the Spark executors at {where} cannot import {missing.group(1)}: install "
            f"gpuwaste {v['gpuwaste']} and pyspark {v['pyspark']} (Python {v['Python']}) in the "
            "Python every worker runs (PYSPARK_PYTHON)."
        )
    if "JAVA_GATEWAY_EXITED" in text or "Java gateway process exited" in text:
        return (
            "could not start Spark's JVM: install Java 17 or later (Debian: "
            "openjdk-17-jre-headless) or set JAVA_HOME."
        )
    cause = _first_cause(text)
    return f"the Spark job of gpuwaste analyze at {where} failed: {cause}"


def _first_cause(text: str) -> str:
    """The most telling line of a Spark failure: a Python exception's last line, else the
    first line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in reversed(lines):
        if re.match(r"^[A-Z]\w*(Error|Exception): ", line) and "Py4J" not in line:
            return line
    return lines[0] if lines else "no reason given"


@dataclass(frozen=True)
class SparkEngine:
    """Runs the batches on the Spark cluster at `master` (a spark://, k8s://, yarn or local
    URL) or the Spark Connect server at `remote` (sc://HOST:PORT); neither: what spark-submit
    or the Spark configuration says, else local[*]."""

    master: str | None = None
    remote: str | None = None

    @property
    def where(self) -> str:
        return self.remote or self.master or "the configured Spark master"

    def session(self) -> Any:
        """The Spark session (the active one when there is one)."""
        try:
            from pyspark.sql import SparkSession
        except ImportError:
            raise SparkEngineError(
                "--engine spark needs pyspark: pip install 'gpuwaste[spark]' (and Java 17)."
            ) from None
        if self.remote:
            check_reachable(self.remote, "Spark Connect server")
        elif self.master:
            check_reachable(self.master, "Spark master")
        # Executors run the driver's Python unless PYSPARK_PYTHON or spark.pyspark.python says
        # otherwise (a shared virtualenv, or the same path on every worker).
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        builder: Any = SparkSession.builder.appName(APP_NAME).config(
            "spark.ui.showConsoleProgress", "false"
        )
        if self.remote:
            builder = builder.remote(self.remote)
        else:
            # The executors' Python workers import polars when they unpickle a task's function,
            # before any of gpuwaste's code runs there: jemalloc's options reach them through
            # their environment (gpuwaste/process.py). A Connect server's executors are its own.
            builder = builder.config(f"spark.executorEnv.{ALLOCATOR_ENV}", allocator_conf())
            if self.master:
                builder = builder.master(self.master)
        try:
            spark = builder.getOrCreate()
        except Exception as exc:
            raise SparkEngineError(explain_failure(str(exc), self.where)) from None
        if not self.remote:
            spark.sparkContext.setLogLevel("ERROR")
        return spark

    def run(self, plan: BatchPlan, data_dir: Path, staging: Path) -> list[BatchOutcome]:
        if not plan.count:
            return []
        spark = self.session()
        common = {
            "data_dir": str(Path(data_dir).absolute()),
            "staging": str(staging),
            "plan": str(Path(plan.file).absolute()),
            "spec": spec_fields(plan.template),
            "versions": versions(),
        }
        tasks = spark.range(0, plan.count, 1, numPartitions=plan.count)
        with warnings.catch_warnings():  # pyspark 4.3 warns that pandas 3 is new to it
            warnings.simplefilter("ignore", FutureWarning)
            staged = tasks.mapInArrow(functools.partial(stage_partition, common), OUTCOME_SCHEMA)
        try:
            rows = staged.collect()
        except Exception as exc:
            raise SparkEngineError(explain_failure(str(exc), self.where)) from None
        return [BatchOutcome.from_json(row["outcome"]) for row in rows]


def stage_partition(
    common: dict[str, Any], batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """mapInArrow's function, on an executor: stage every batch whose index arrives (glibc's
    threshold set first, once per Python worker, as the `gpuwaste` command sets its own)."""
    fix_mmap_threshold()
    for record_batch in batches:
        for index in record_batch.column("id").to_pylist():
            outcome = stage_planned(common, int(index))
            yield pa.RecordBatch.from_pydict({"batch": [index], "outcome": [outcome.to_json()]})


def stage_planned(common: dict[str, Any], index: int) -> BatchOutcome:
    """Batch `index` of the plan the driver staged, checked first: the executor runs the
    driver's versions and sees the driver's warehouse."""
    host = socket.gethostname()
    mismatch = version_mismatch(common["versions"], versions())
    if mismatch:
        return BatchOutcome(
            index=index,
            error=(
                f"the Spark executor on {host} runs {mismatch}: install the driver's versions "
                "on every worker."
            ),
        )
    data_dir, staging, plan = (Path(common[k]) for k in ("data_dir", "staging", "plan"))
    if not plan.is_file() or not (data_dir / "parquet").is_dir():
        return BatchOutcome(
            index=index,
            error=(
                f"the Spark executor on {host} cannot see the warehouse at {data_dir}: every "
                "worker must see the data directory at the driver's path (a shared filesystem, "
                "or a ReadWriteMany volume on Kubernetes)."
            ),
        )
    template = BatchSpec(**common["spec"])
    return stage_batch(planned_spec(plan, template, index), data_dir, staging)


__all__ = ["SparkEngine", "SparkEngineError", "explain_failure", "version_mismatch"]
