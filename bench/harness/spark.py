"""A real Spark standalone cluster on loopback: one master and N workers, started with the
launcher the pyspark package ships (`$SPARK_HOME/bin/spark-class`, SPARK_HOME = the pyspark
package folder; pyspark does not ship `sbin/start-master.sh`, which runs the same class through
`spark-daemon.sh`), with the Java on PATH (Debian's OpenJDK 17 headless).

Every process is started in its own process group (a worker's executors are its children), so
`kill_worker` can SIGKILL one worker with everything it runs, as when a node dies, and `stop`
ends exactly the processes started here.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.components import free_port, require, require_module

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 120


def spark_home() -> Path:
    """The pyspark package folder; fail under CI, skip elsewhere, without pyspark or java."""
    require("java")
    pyspark = require_module(
        "pyspark", "pyspark is not installed (pip install -e '.[dev]' installs it)"
    )
    return Path(str(pyspark.__file__)).parent


def _env(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        SPARK_HOME=str(home),
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
        PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    )
    return env


@dataclass
class StandaloneCluster:
    home: Path
    work: Path
    port: int = field(default_factory=free_port)
    ui_port: int = field(default_factory=free_port)
    master: subprocess.Popen[bytes] | None = None
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _spawn(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        log = open(self.work / f"{name}.log", "ab")  # noqa: SIM115 (kept open by the process)
        return subprocess.Popen(
            [str(self.home / "bin" / "spark-class"), *args],
            env=_env(self.home),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def start(self, workers: int) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        self.master = self._spawn(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1", "--port", str(self.port), "--webui-port", str(self.ui_port),
        )  # fmt: skip
        for _ in range(workers):
            self.add_worker()
        self.wait_for_workers(workers)

    def add_worker(self) -> None:
        n = len(self.workers)
        self.workers.append(
            self._spawn(
                f"worker{n}",
                "org.apache.spark.deploy.worker.Worker",
                "--host",
                "127.0.0.1",
                "--cores",
                "1",
                "--memory",
                "2g",
                "--webui-port",
                str(free_port()),
                "--work-dir",
                str(self.work / f"worker{n}"),
                self.url,
            )
        )

    def state(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as r:
            data: dict[str, Any] = json.load(r)
            return data

    def alive_workers(self) -> int:
        try:
            return int(self.state().get("aliveworkers", 0))
        except OSError:
            return 0

    def wait_for_workers(self, n: int) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while self.alive_workers() < n:
            if time.monotonic() > deadline:
                logs = "\n".join(p.read_text()[-1500:] for p in self.work.glob("*.log"))
                raise RuntimeError(f"{n} Spark workers did not register in time:\n{logs}")
            time.sleep(0.5)

    def kill_worker(self, i: int) -> None:
        """SIGKILL worker `i` and its executors (its process group): a node that dies."""
        os.killpg(self.workers[i].pid, signal.SIGKILL)
        self.workers[i].wait()

    def stop(self) -> None:
        for proc in [*self.workers, *([self.master] if self.master else [])]:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in [*self.workers, *([self.master] if self.master else [])]:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@contextmanager
def standalone_cluster(work: Path, workers: int = 2) -> Iterator[StandaloneCluster]:
    cluster = StandaloneCluster(spark_home(), work)
    try:
        cluster.start(workers)
        yield cluster
    finally:
        cluster.stop()


def session(master: str) -> Any:
    """The run's Spark session on `master`: one core and 1 GiB per executor, on loopback."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    return (
        SparkSession.builder.master(master)
        .appName("gpuwaste tests")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.executor.cores", "1")
        .config("spark.executor.memory", "1g")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.executorEnv.PYTHONPATH", str(REPO))
        .getOrCreate()
    )


@contextmanager
def connect_server(work: Path) -> Iterator[str]:
    """A Spark Connect server on loopback (local[2]), started with pyspark's spark-submit as
    `sbin/start-connect-server.sh` starts it; yields its sc:// URL."""
    home = spark_home()
    require_module(  # pyspark's Connect client needs it
        "grpc", "the Spark Connect client is not installed (pip install -e '.[dev]' installs it)"
    )
    work.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log = open(work / "connect.log", "ab")  # noqa: SIM115 (kept open by the process)
    proc = subprocess.Popen(
        [
            str(home / "bin" / "spark-submit"),
            "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
            "--name", "gpuwaste tests connect", "--master", "local[2]",
            "--conf", f"spark.connect.grpc.binding.port={port}",
            "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
            "--conf", "spark.ui.enabled=false",
        ],
        env=_env(home), stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"the Spark Connect server did not start:\n"
                        f"{(work / 'connect.log').read_text()[-2000:]}"
                    ) from None
                time.sleep(0.5)
        yield f"sc://127.0.0.1:{port}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
