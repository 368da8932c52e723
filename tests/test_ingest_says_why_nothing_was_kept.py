"""An ingest that keeps nothing says what it found and why, and fails where nothing was usable.

Real captures (tests/fixtures) through the real command line (`gpuwaste ingest ...` as a
subprocess), and real HTTP servers on loopback for the server cases: one answering the
Prometheus API with instant vectors (a captured `/api/v1/query` body), one that is a plain web
server (Python's http.server), not Prometheus.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXTURES

EXPORTER = FIXTURES / "exporter_text" / "slurm_job_exporter_readme_sample.prom"
KSM = sorted((FIXTURES / "kube_state_metrics").glob("*.prom"))
VECTORS = sorted((FIXTURES / "prometheus_api").glob("kops_query_vector_*.json"))
WINDOW = ["--since", "2026-03-20T12:00:00Z", "--until", "2026-03-20T13:00:00Z"]


def gpuwaste(*args: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("gpuwaste")
    return subprocess.run(
        [str(exe), *args], capture_output=True, text=True, timeout=120, check=False
    )


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    """The run failed with exactly one line on stderr, no traceback; that line."""
    assert done.returncode == 1, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


def nothing_written(data_dir: Path) -> bool:
    parquet = data_dir / "parquet"
    return not parquet.exists() or not any(parquet.rglob("*.parquet"))


def refused_scrape(scrape: Path, data_dir: Path) -> str:
    """`ingest openmetrics` of a scrape with nothing gpuwaste reads: its one error line."""
    args = ("--file", str(scrape), "--cluster", "x", "--data-dir", str(data_dir))
    line = one_error_line(gpuwaste("ingest", "openmetrics", *args))
    assert str(scrape) in line and "nothing was written" in line, line
    assert nothing_written(data_dir)
    return line


def test_a_slurm_job_exporter_scrape_is_recognised_and_asks_for_its_host(
    data_dir: Path, tmp_path: Path
) -> None:
    """The scrape is read as the slurm-job-exporter dialect (#43); saved from one host, its
    series have no host label, which --host gives."""
    line = refused_scrape(EXPORTER, data_dir)
    assert "holds slurm-job-exporter GPU series without a host label" in line, line
    assert "--host NAME" in line, line
    args = ("--file", str(EXPORTER), "--cluster", "x", "--data-dir", str(data_dir))
    done = gpuwaste("ingest", "openmetrics", *args, "--host", "gpu-node-1")
    assert done.returncode == 0, done.stderr
    assert "telemetry slurm-job-exporter (recognised from its series)" in done.stdout


def test_a_slurm_job_exporter_scrape_without_gpu_series_says_what_it_is(
    data_dir: Path, tmp_path: Path
) -> None:
    cgroup_only = tmp_path / "cgroup_only.prom"
    lines = EXPORTER.read_text().splitlines()
    cgroup_only.write_text("\n".join(ln for ln in lines if "_gpu" not in ln) + "\n")
    line = refused_scrape(cgroup_only, data_dir)
    assert "holds a per-Slurm-job exporter's series" in line, line
    assert "--telemetry slurm-job-exporter" in line, line
    assert "DCGM_FI_DEV_GPU_UTIL" in line, line


@pytest.mark.parametrize("scrape", KSM, ids=[p.stem for p in KSM])
def test_a_kube_state_metrics_scrape_says_what_it_is(scrape: Path, data_dir: Path) -> None:
    line = refused_scrape(scrape, data_dir)
    assert "holds kube-state-metrics series" in line and "kube_pod_info" in line, line


def test_an_empty_sacct_file_fails_a_header_only_one_is_no_jobs(
    data_dir: Path, tmp_path: Path
) -> None:
    empty = tmp_path / "sacct.txt"
    empty.write_text("")
    args = ("--cluster", "x", "--data-dir", str(data_dir))
    line = one_error_line(gpuwaste("ingest", "slurm", "--file", str(empty), *args))
    assert str(empty) in line and "empty: no header line and no records" in line, line
    assert nothing_written(data_dir)
    header_only = tmp_path / "sacct_header.txt"
    header_only.write_text("JobID|JobIDRaw|State|Start|End|AllocTRES|NodeList\n")
    done = gpuwaste("ingest", "slurm", "--file", str(header_only), *args)
    assert done.returncode == 0, done.stderr
    assert "x/slurm: 0 records accepted, 0 quarantined; 0 jobs" in done.stdout


class _FakeApi(BaseHTTPRequestHandler):
    """Answers the Prometheus API paths with fixed bodies (`server.bodies`: path -> bytes)."""

    def log_message(self, format: str, *args: object) -> None:
        return

    def do_GET(self) -> None:
        body = self.server.bodies.get(self.path.split("?", 1)[0])  # type: ignore[attr-defined]
        status = 200 if body is not None else 404
        body = body if body is not None else b"not found"
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@contextmanager
def serving(handler: Any, **attrs: Any) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    for k, v in attrs.items():
        setattr(server, k, v)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("answer", VECTORS, ids=[p.stem for p in VECTORS])
def test_a_server_answering_range_selectors_with_vectors_is_refused(
    answer: Path, data_dir: Path
) -> None:
    names = json.dumps({"status": "success", "data": ["DCGM_FI_DEV_GPU_UTIL"]}).encode()
    bodies = {"/api/v1/label/__name__/values": names, "/api/v1/query": answer.read_bytes()}
    with serving(_FakeApi, bodies=bodies) as url:
        done = gpuwaste(
            "ingest", "prometheus", "--url", url, "--cluster", "v", "--data-dir", str(data_dir),
            *WINDOW, "--quiet",
        )  # fmt: skip
    line = one_error_line(done)
    assert url in line and "with an instant vector" in line, line
    assert "DCGM_FI_DEV_GPU_UTIL{" in line and "not the stored samples" in line, line
    assert nothing_written(data_dir)


def test_a_web_server_that_is_not_prometheus_is_named(data_dir: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "index.html").write_text("<!DOCTYPE html><html><body>Grafana</body></html>")

    class Site(SimpleHTTPRequestHandler):
        def __init__(self, *a: Any, **kw: Any) -> None:
            super().__init__(*a, directory=str(site), **kw)

        def log_message(self, format: str, *args: object) -> None:
            return

    class EveryPathIsThePage(Site):
        def do_GET(self) -> None:  # a single-page app: the page for every path
            self.path = "/index.html"
            super().do_GET()

    for handler, answer in ((Site, "HTTP 404"), (EveryPathIsThePage, "an HTML page")):
        with serving(handler) as url:
            done = gpuwaste(
                "ingest", "prometheus", "--url", url, "--cluster", "w",
                "--data-dir", str(data_dir), *WINDOW, "--quiet",
            )  # fmt: skip
        line = one_error_line(done)
        assert f"the server at {url} is not a Prometheus API" in line, line
        assert f"/api/v1/label/__name__/values answered {answer}" in line, line
        assert "not JSON" not in line.replace("not Prometheus JSON", ""), line
        assert nothing_written(data_dir)
