"""A real Prometheus for tests: OpenMetrics -> `promtool` backfill -> Debian's `prometheus`.

    with running_prometheus(om_file, tmp_path / "prom") as prom:
        ... prom.url ...
        prom.stop()      # e.g. to test an unreachable server mid-run
        prom.start()     # same data, same port

`PrometheusServer` backfills into a temporary folder (Prometheus compacts and rewrites its data
folder, so never point it at a checked-in one), starts on a free loopback port with no scrape
targets and a 100-year retention (retention counts from the newest block, so a short one deletes
backfilled data), waits for `/-/ready`, and stops with SIGTERM (SIGKILL after 10 s). Given a
list of files, it backfills each into the one data folder (one server for several clusters, told
apart by a label of their own).

`write_synthetic_openmetrics` writes a small DCGM + node-exporter (+ kube-state-metrics) cluster
with known contents (gaps, label variants), for tests and for the benchmark while the project's
generator is not needed; it returns what it planted.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import requests

from harness.components import free_port, require

READY_TIMEOUT_S = 30.0


class PrometheusServer:
    """One Prometheus process over a backfilled data folder under `workdir`."""

    def __init__(
        self, openmetrics: Path | list[Path], workdir: Path, *, max_samples: int | None = None
    ) -> None:
        # several files backfill into one data folder (Prometheus merges overlapping blocks)
        files = openmetrics if isinstance(openmetrics, list) else [openmetrics]
        self.files = [Path(f) for f in files]
        self.workdir = Path(workdir)
        self.data_dir = self.workdir / "data"
        self.config = self.workdir / "prometheus.yml"
        self.log = self.workdir / "prometheus.log"
        self.max_samples = max_samples
        self.port: int | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.promtool = require("promtool")
        self.binary = require("prometheus")

    @property
    def url(self) -> str:
        if self.port is None:
            raise RuntimeError("Prometheus was never started")
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def backfill(self) -> float:
        """`promtool tsdb create-blocks-from openmetrics` of each file into the data folder;
        seconds taken."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        for path in self.files:
            done = subprocess.run(
                [
                    self.promtool,
                    "tsdb",
                    "create-blocks-from",
                    "openmetrics",
                    "--max-block-duration=24h",
                    str(path),
                    str(self.data_dir),
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            if done.returncode != 0:
                raise RuntimeError(f"promtool failed on {path}: {done.stderr.strip()[-2000:]}")
        return time.perf_counter() - t0

    def start(self) -> str:
        """Start (or restart on the same port); returns the URL once ready."""
        if self.running:
            return self.url
        if not self.data_dir.exists():
            self.backfill()
        self.config.write_text("global:\n  scrape_interval: 15s\nscrape_configs: []\n")
        if self.port is None:
            self.port = free_port()
        args = [
            self.binary,
            f"--config.file={self.config}",
            f"--storage.tsdb.path={self.data_dir}",
            "--storage.tsdb.retention.time=100y",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--log.level=warn",
        ]
        if self.max_samples is not None:
            args.append(f"--query.max-samples={self.max_samples}")
        log = open(self.log, "ab")  # noqa: SIM115 (closed with the process)
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited: {self.log.read_text()[-2000:]}")
            try:
                if requests.get(f"{self.url}/-/ready", timeout=1).status_code == 200:
                    return self.url
            except requests.RequestException:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"prometheus not ready after {READY_TIMEOUT_S} s")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 10 s; the port is kept for a restart."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def restart(self) -> str:
        self.stop()
        return self.start()

    def __enter__(self) -> PrometheusServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextmanager
def running_prometheus(
    openmetrics: Path | list[Path], workdir: Path, *, max_samples: int | None = None
) -> Iterator[PrometheusServer]:
    server = PrometheusServer(openmetrics, workdir, max_samples=max_samples)
    server.backfill()
    try:
        server.start()
        yield server
    finally:
        server.stop()


def with_label(src: Path, dst: Path, name: str, value: str) -> Path:
    """A copy of an OpenMetrics file whose every sample carries `name="value"` first, so that
    several clusters backfilled into one server stay apart (select with `label_filter`)."""
    with src.open() as fin, dst.open("w") as fout:
        for line in fin:
            if not line.startswith("#"):
                metric, sep, rest = line.partition("{")
                line = f'{metric}{{{name}="{value}",{rest}' if sep else line
            fout.write(line)
    return dst


# ------------------------------------------------------------------------------------------------
# A small synthetic cluster in OpenMetrics, with what it planted.


@dataclass
class Synthetic:
    """Shape of the cluster; `planted_*` are filled in by `write_synthetic_openmetrics`."""

    start_s: int = 1_790_000_000  # 2026-09-21T14:13:20Z
    interval_s: int = 15
    points: int = 480  # 2 h at 15 s
    hosts: int = 2
    gpus_per_host: int = 4
    host_labels: tuple[str, ...] = ("Hostname", "hostname")  # cycled over hosts
    util_metric: str = "DCGM_FI_DEV_GPU_UTIL"  # or DCGM_FI_PROF_SM_ACTIVE (ratio) ...
    extra_util_metrics: tuple[str, ...] = ()  # also written (lower preference)
    job_label: str | None = "hpc_job"  # or "pod" / "exported_pod" (+ namespace), None: no jobs
    namespace: str = "team-a"
    gaps: list[tuple[int, int, int, int]] = field(default_factory=list)  # host, gpu, k0, k1
    bad_values: list[tuple[int, int, int, str]] = field(default_factory=list)  # host,gpu,k,text
    kube: bool = False
    node: bool = True
    planted_gpu_rows: int = 0
    planted_host_points: int = 0
    planted_jobs: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # id->k0,k1,gpus

    def host(self, h: int) -> str:
        return f"node{h:02d}"

    def job_of(self, h: int, g: int, k: int) -> str | None:
        """GPUs are paired into jobs over the first 60 % of the points."""
        if self.job_label is None or k >= int(self.points * 0.6):
            return None
        return f"job-{h}-{g // 2}"

    def missing(self, h: int, g: int, k: int) -> bool:
        return any(h == gh and g == gg and k0 <= k < k1 for gh, gg, k0, k1 in self.gaps)

    def util(self, h: int, g: int, k: int) -> int:
        return (h * 7 + g * 13 + k) % 101

    def mem(self, h: int, g: int, k: int) -> int:
        return 1000 + 100 * g + (k % 50)


RATIO_METRICS = {
    "DCGM_FI_PROF_SM_ACTIVE",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
}


def _labels(spec: Synthetic, h: int, g: int, job: str | None) -> str:
    host_label = spec.host_labels[h % len(spec.host_labels)]
    parts = [f'gpu="{g}"', f'UUID="GPU-{h:04d}-{g:04d}"', f'{host_label}="{spec.host(h)}"']
    if job is not None and spec.job_label is not None:
        if spec.job_label == "hpc_job":
            parts.append(f'hpc_job="{job}"')
        else:
            prefix = "exported_" if spec.job_label.startswith("exported_") else ""
            parts.append(f'{prefix}namespace="{spec.namespace}"')
            parts.append(f'{spec.job_label}="{job}"')
            if prefix:  # the exporter's own pod, as a ServiceMonitor attaches it
                parts.append('pod="dcgm-exporter-abcde"')
                parts.append('job="dcgm-exporter"')
    return ",".join(parts)


def write_synthetic_openmetrics(spec: Synthetic, path: Path) -> Synthetic:
    """Write the cluster to `path` (OpenMetrics, seconds, `# EOF`); fill in what was planted."""
    ts = [spec.start_s + k * spec.interval_s for k in range(spec.points)]
    bad = {(h, g, k): text for h, g, k, text in spec.bad_values}
    gpu_keys: set[tuple[int, int, str | None, int]] = set()
    jobs: dict[str, list[int]] = {}
    with open(path, "w", encoding="utf-8") as fh:
        families = [spec.util_metric, *spec.extra_util_metrics]
        families += ["DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE"]
        for family in families:
            fh.write(f"# TYPE {family} gauge\n")
            for h in range(spec.hosts):
                for g in range(spec.gpus_per_host):
                    # one series per (gpu, job): consecutive runs of the same label set
                    runs: dict[str | None, list[int]] = {}
                    for k in range(spec.points):
                        if spec.missing(h, g, k):
                            continue
                        runs.setdefault(spec.job_of(h, g, k), []).append(k)
                    for job, ks in runs.items():
                        labels = _labels(spec, h, g, job)
                        lines = []
                        for k in ks:
                            if family == spec.util_metric:
                                gpu_keys.add((h, g, job, k))
                                if job is not None:
                                    jobs.setdefault(job, []).append(k)
                            if (h, g, k) in bad and family == spec.util_metric:
                                value = bad[(h, g, k)]
                            elif family in RATIO_METRICS:
                                value = f"{spec.util(h, g, k) / 100:.6f}"
                            elif family == "DCGM_FI_DEV_FB_USED":
                                value = str(spec.mem(h, g, k))
                            elif family == "DCGM_FI_DEV_FB_FREE":
                                value = str(81920 - spec.mem(h, g, k))
                            else:
                                value = str(spec.util(h, g, k))
                            lines.append(f"{family}{{{labels}}} {value} {ts[k]}\n")
                        fh.writelines(lines)
        if spec.node:
            fh.write("# TYPE node_cpu_seconds counter\n")
            for h in range(spec.hosts):
                for cpu in range(2):
                    for mode in ("idle", "user"):
                        total = 1000.0
                        lines = []
                        for k in range(spec.points):
                            busy = ((h + k) % 10) / 10  # 0..0.9
                            share = 1 - busy if mode == "idle" else busy
                            total += spec.interval_s * share
                            lines.append(
                                f'node_cpu_seconds_total{{cpu="{cpu}",instance="{spec.host(h)}:9100",'
                                f'job="node",mode="{mode}"}} {total:.3f} {ts[k]}\n'
                            )
                        fh.writelines(lines)
            for family in ("node_memory_MemTotal_bytes", "node_memory_MemAvailable_bytes"):
                fh.write(f"# TYPE {family} gauge\n")
                for h in range(spec.hosts):
                    fh.writelines(
                        f'{family}{{instance="{spec.host(h)}:9100",job="node"}} '
                        f"{_node_mem(family, k)} {ts[k]}\n"
                        for k in range(spec.points)
                    )
        if spec.kube and spec.job_label in ("pod", "exported_pod"):
            _write_kube(spec, fh, ts, jobs)
        fh.write("# EOF\n")
    spec.planted_gpu_rows = len(gpu_keys)
    spec.planted_host_points = spec.hosts * spec.points if spec.node else 0
    spec.planted_jobs = {
        job: (min(ks), max(ks), len({(h, g) for h, g, j, _ in gpu_keys if j == job}))
        for job, ks in jobs.items()
    }
    return spec


def _node_mem(family: str, k: int) -> int:
    total = 1_000_000_000
    return total if family == "node_memory_MemTotal_bytes" else total - 1_000_000 * (k % 100)


def _write_kube(spec: Synthetic, fh: TextIO, ts: list[int], jobs: dict[str, list[int]]) -> None:
    """kube-state-metrics for every pod job: it runs over its labelled points, then Succeeded
    (even-numbered pods) or is deleted while Running (odd: no more series)."""
    write = fh.write
    end_k = int(spec.points * 0.6)
    pods = sorted(jobs)
    families: dict[str, list[str]] = {
        "kube_pod_container_resource_requests": [],
        "kube_pod_start_time": [],
        "kube_pod_completion_time": [],
        "kube_pod_status_phase": [],
    }
    for n, pod in enumerate(pods):
        base = f'namespace="{spec.namespace}",pod="{pod}"'
        finished = n % 2 == 0
        last = spec.points if finished else end_k
        families["kube_pod_container_resource_requests"].append(
            "".join(
                f'kube_pod_container_resource_requests{{{base},container="main",node="{pod}",'
                f'resource="nvidia_com_gpu",unit="integer"}} 2 {ts[k]}\n'
                for k in range(last)
            )
        )
        families["kube_pod_start_time"].append(
            "".join(f"kube_pod_start_time{{{base}}} {ts[0]} {ts[k]}\n" for k in range(last))
        )
        if finished:
            families["kube_pod_completion_time"].append(
                "".join(
                    f"kube_pod_completion_time{{{base}}} {ts[end_k]} {ts[k]}\n"
                    for k in range(end_k, last)
                )
            )
        for phase in ("Running", "Succeeded"):
            families["kube_pod_status_phase"].append(
                "".join(
                    f'kube_pod_status_phase{{{base},phase="{phase}"}} '
                    f"{int((phase == 'Running') == (k < end_k))} {ts[k]}\n"
                    for k in range(last)
                )
            )
    for family, blocks in families.items():
        write(f"# TYPE {family} gauge\n")
        for block in blocks:
            write(block)
