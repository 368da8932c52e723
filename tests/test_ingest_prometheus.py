"""Ingest from a real Prometheus (Debian's, backfilled with promtool): no mocks.

Two backfilled clusters, one server each for the module:
- `hpc`: GPU_UTIL, `hpc_job` labels, host label `Hostname` on one host and `hostname` on the
  other, a 10-minute gap on one GPU, three bad values;
- `k8s`: SM_ACTIVE (ratio) and GPU_UTIL both exported, pods behind a ServiceMonitor
  (`exported_pod` + the exporter's own `pod`), kube-state-metrics for the pods.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from harness.components import free_port
from harness.prometheus import (
    PrometheusServer,
    Synthetic,
    running_prometheus,
    write_synthetic_openmetrics,
)

from gpuwaste.config import (
    ClusterConfig,
    KubernetesJobs,
    PrometheusSource,
    Settings,
    SlurmSource,
)
from gpuwaste.ingest.base import IngestError, IngestResult
from gpuwaste.ingest.prometheus.source import SOURCE, ingest_prometheus
from gpuwaste.ingest.slurm.source import ingest_slurm
from gpuwaste.warehouse.bookkeeping import get_watermark, set_watermark
from gpuwaste.warehouse.lock import writer_lock
from gpuwaste.warehouse.store import Warehouse

pytestmark = pytest.mark.prometheus

Served = tuple[PrometheusServer, Synthetic]
WINDOW_S = 1800.0  # 2 h of data -> 4 windows
GAP = (0, 1, 100, 140)  # host 0, GPU 1, points 100..139 (10 minutes) missing
BAD = [(1, 2, 10, "NaN"), (1, 2, 11, "-5"), (1, 3, 12, "250")]


def _bounds(spec: Synthetic) -> tuple[datetime, datetime]:
    start = datetime.fromtimestamp(spec.start_s, UTC)
    return start, start + timedelta(seconds=spec.points * spec.interval_s)


@pytest.fixture(scope="module")
def hpc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PrometheusServer, Synthetic]]:
    tmp = tmp_path_factory.mktemp("hpc")
    spec = write_synthetic_openmetrics(Synthetic(gaps=[GAP], bad_values=BAD), tmp / "metrics.om")
    with running_prometheus(tmp / "metrics.om", tmp / "prom") as server:
        yield server, spec


@pytest.fixture(scope="module")
def k8s(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PrometheusServer, Synthetic]]:
    tmp = tmp_path_factory.mktemp("k8s")
    spec = Synthetic(
        util_metric="DCGM_FI_PROF_SM_ACTIVE",
        extra_util_metrics=("DCGM_FI_DEV_GPU_UTIL",),
        job_label="exported_pod",
        kube=True,
        points=240,
    )
    write_synthetic_openmetrics(spec, tmp / "metrics.om")
    with running_prometheus(tmp / "metrics.om", tmp / "prom") as server:
        yield server, spec


def _cluster(url: str, **kw: Any) -> ClusterConfig:
    return ClusterConfig(name="c1", prometheus=PrometheusSource(url=url, retries=1, **kw))


def _run(data_dir: Path, cluster: ClusterConfig, spec: Synthetic, **kw: Any) -> IngestResult:
    start, end = _bounds(spec)
    return ingest_prometheus(
        Settings(data_dir=data_dir),
        cluster,
        since=start,
        until=end,
        quiet=True,
        window_s=WINDOW_S,
        **kw,
    )


def _gpu(data_dir: Path) -> pl.DataFrame:
    return Warehouse(data_dir).read("gpu_samples", "c1")


def test_all_samples_arrive_exactly_once_and_rerun_adds_nothing(
    hpc: Served, data_dir: Path
) -> None:
    server, spec = hpc
    result = _run(data_dir, _cluster(server.url), spec)
    gpu = _gpu(data_dir)
    assert gpu.height == spec.planted_gpu_rows
    assert gpu.select("host", "gpu", "ts", "job_id").unique().height == gpu.height
    assert result.written["gpu_samples"] == spec.planted_gpu_rows
    # values as planted
    row = (
        gpu.filter((pl.col("host") == "node01") & (pl.col("gpu") == 0))
        .sort("ts")
        .row(5, named=True)
    )
    assert row["util"] == spec.util(1, 0, 5)
    assert row["mem_used_mib"] == spec.mem(1, 0, 5)
    assert row["mem_total_mib"] == 81920
    assert row["job_id"] == "job-1-0" and row["uuid"] == "GPU-0001-0000"
    assert set(gpu["util_source"].drop_nulls().unique()) == {"DCGM_FI_DEV_GPU_UTIL"}
    assert gpu["util"].null_count() == len(BAD)
    # host label variants: Hostname on node00, hostname on node01
    assert sorted(gpu["host"].unique()) == ["node00", "node01"]
    host = Warehouse(data_dir).read("host_samples", "c1")
    assert host.height == spec.planted_host_points
    assert host.filter(pl.col("cpu_util").is_not_null()).height >= spec.planted_host_points - 2
    # watermark at the end
    assert get_watermark(Warehouse(data_dir), "c1", SOURCE) == _bounds(spec)[1]
    # a second run (and a run with a wider --since) adds nothing
    _run(data_dir, _cluster(server.url), spec)
    assert _gpu(data_dir).height == spec.planted_gpu_rows
    assert Warehouse(data_dir).read("host_samples", "c1").height == host.height


def test_bad_values_are_quarantined_not_written(hpc: Served, data_dir: Path) -> None:
    server, spec = hpc
    _run(data_dir, _cluster(server.url), spec)
    q = Warehouse(data_dir).read("quarantine", "c1")
    reasons = sorted(r.split(":")[0] for r in q["reason"].to_list())
    assert reasons == ["NaN", "above range", "negative"]
    assert sorted(q["raw"].to_list()) == ["-5", "250", "NaN"]
    assert all("node01" in loc for loc in q["location"].to_list())
    gpu = _gpu(data_dir)
    bad = gpu.filter(
        (pl.col("host") == "node01") & pl.col("gpu").is_in([2, 3]) & pl.col("util").is_null()
    )
    assert bad.height == 3  # the memory of those samples is kept, the utilization is not
    # re-running replaces the quarantine batches instead of adding
    set_watermark(Warehouse(data_dir), "c1", SOURCE, _bounds(spec)[0])
    _run(data_dir, _cluster(server.url), spec)
    assert Warehouse(data_dir).read("quarantine", "c1").height == 3
    # ... also when the new run's windows have other edges
    set_watermark(Warehouse(data_dir), "c1", SOURCE, _bounds(spec)[0] + timedelta(seconds=60))
    _run(data_dir, _cluster(server.url), spec)
    assert Warehouse(data_dir).read("quarantine", "c1").height == 3
    assert _gpu(data_dir).height == spec.planted_gpu_rows


def test_gap_stays_a_gap(hpc: Served, data_dir: Path) -> None:
    server, spec = hpc
    _run(data_dir, _cluster(server.url), spec)
    _h, g, k0, k1 = GAP
    series = _gpu(data_dir).filter((pl.col("host") == "node00") & (pl.col("gpu") == g)).sort("ts")
    start, _ = _bounds(spec)
    ks = [round((t - start).total_seconds()) // spec.interval_s for t in series["ts"].to_list()]
    assert not [k for k in ks if k0 <= k < k1]
    assert k0 - 1 in ks and k1 in ks
    steps = series["ts"].diff().drop_nulls().dt.total_seconds()
    assert steps.max() == (k1 - k0 + 1) * spec.interval_s  # one 615 s step, no filled values
    assert len(ks) == spec.points - (k1 - k0)


def test_run_killed_between_windows_resumes(hpc: Served, data_dir: Path) -> None:
    server, spec = hpc

    class Killed(Exception):
        pass

    def kill_after_second(i: int, _end: datetime) -> None:
        if i == 1:
            raise Killed

    with pytest.raises(Killed):
        _run(data_dir, _cluster(server.url), spec, after_window=kill_after_second)
    start, _end = _bounds(spec)
    wm = get_watermark(Warehouse(data_dir), "c1", SOURCE)
    assert wm == start + timedelta(seconds=2 * WINDOW_S)
    partial = _gpu(data_dir)
    assert 0 < partial.height < spec.planted_gpu_rows
    assert wm is not None and partial["ts"].max() < wm  # type: ignore[operator]
    _run(data_dir, _cluster(server.url), spec)
    assert _gpu(data_dir).height == spec.planted_gpu_rows
    # a crash after the data was written but before the watermark moved: redo, no duplicates
    set_watermark(Warehouse(data_dir), "c1", SOURCE, start + timedelta(seconds=WINDOW_S))
    _run(data_dir, _cluster(server.url), spec)
    gpu = _gpu(data_dir)
    assert gpu.height == spec.planted_gpu_rows
    assert gpu.select("host", "gpu", "ts", "job_id").unique().height == gpu.height


def test_prometheus_stopped_mid_run(hpc: Served, data_dir: Path) -> None:
    server, spec = hpc

    def stop_after_first(i: int, _end: datetime) -> None:
        if i == 0:
            server.stop()

    try:
        with pytest.raises(IngestError) as err:
            _run(data_dir, _cluster(server.url), spec, after_window=stop_after_first)
    finally:
        server.start()
    message = str(err.value)
    assert server.url in message and "unreachable" in message and "\n" not in message
    start, _ = _bounds(spec)
    wm = get_watermark(Warehouse(data_dir), "c1", SOURCE)
    assert wm == start + timedelta(seconds=WINDOW_S)
    gpu = _gpu(data_dir)
    assert wm is not None and gpu.height > 0
    assert gpu["ts"].max() < wm  # type: ignore[operator]  # only the finished window
    assert gpu.select("host", "gpu", "ts", "job_id").unique().height == gpu.height
    _run(data_dir, _cluster(server.url), spec)
    assert _gpu(data_dir).height == spec.planted_gpu_rows


def test_jobs_from_telemetry_labels(hpc: Served, data_dir: Path) -> None:
    server, spec = hpc
    _run(data_dir, _cluster(server.url), spec)
    wh = Warehouse(data_dir)
    jobs = wh.read("jobs", "c1").sort("job_id")
    assert jobs["job_id"].to_list() == sorted(spec.planted_jobs)
    start, _ = _bounds(spec)
    for row in jobs.iter_rows(named=True):
        k0, k1, n = spec.planted_jobs[row["job_id"]]
        assert row["gpus"] == n
        assert row["start_ts"] == start + timedelta(seconds=k0 * spec.interval_s)
        assert row["end_ts"] == start + timedelta(seconds=(k1 + 1) * spec.interval_s)
        assert row["state"] is None and row["raw_state"] == "ended" and row["is_debug"] is False
    spans = wh.read("job_gpus", "c1")
    assert spans.height == sum(n for _, _, n in spec.planted_jobs.values())


def test_metric_preference_pods_and_kubernetes_jobs(k8s: Served, data_dir: Path) -> None:
    server, spec = k8s
    cluster = _cluster(
        server.url, kubernetes=KubernetesJobs(enabled=True, debug_namespaces=["team-a"])
    )
    _run(data_dir, cluster, spec)
    gpu = _gpu(data_dir)
    assert gpu.height == spec.planted_gpu_rows
    assert set(gpu["util_source"].unique()) == {"DCGM_FI_PROF_SM_ACTIVE"}
    row = (
        gpu.filter((pl.col("host") == "node00") & (pl.col("gpu") == 3))
        .sort("ts")
        .row(7, named=True)
    )
    assert row["util"] == pytest.approx(spec.util(0, 3, 7))
    assert row["sm_active"] == pytest.approx(spec.util(0, 3, 7))
    # exported_pod (the workload) wins over pod (the exporter itself)
    ids = set(gpu["job_id"].drop_nulls().unique())
    assert ids == {f"team-a/{j}" for j in spec.planted_jobs}
    jobs = Warehouse(data_dir).read("jobs", "c1").sort("job_id")
    assert jobs["job_id"].to_list() == sorted(f"team-a/{j}" for j in spec.planted_jobs)
    start, _ = _bounds(spec)
    end_k = int(spec.points * 0.6)
    for n, row in enumerate(jobs.iter_rows(named=True)):
        assert row["gpus"] == 2 and row["vc"] == "team-a" and row["is_debug"] is True
        assert row["start_ts"] == start
        if n % 2 == 0:  # Succeeded
            assert (row["state"], row["raw_state"]) == ("passed", "Succeeded")
            assert row["end_ts"] == start + timedelta(seconds=end_k * spec.interval_s)
        else:  # deleted while Running: its series stop
            assert (row["state"], row["raw_state"]) == ("killed", "Running (deleted)")
            assert row["end_ts"] == start + timedelta(seconds=(end_k - 1) * spec.interval_s)
    # job_gpus from the DCGM pod labels
    spans = Warehouse(data_dir).read("job_gpus", "c1")
    assert spans.height == 2 * len(spec.planted_jobs)
    # and again: nothing doubles
    set_watermark(Warehouse(data_dir), "c1", SOURCE, start)
    _run(data_dir, cluster, spec)
    assert _gpu(data_dir).height == spec.planted_gpu_rows
    assert Warehouse(data_dir).read("jobs", "c1").height == len(spec.planted_jobs)


def test_label_filter_selects_nothing_when_it_matches_nothing(hpc: Served, data_dir: Path) -> None:
    """A run that finds no series says so, naming the server, the filter and the time range
    (not an error: a scheduled run over a quiet stretch finds nothing either)."""
    server, spec = hpc
    start, end = _bounds(spec)
    result = _run(data_dir, _cluster(server.url, label_filter='{cluster="other"}'), spec)
    assert _gpu(data_dir).height == 0 and result.accepted == 0
    assert result.note.endswith(
        f'; Prometheus at {server.url} has no series at all matching {{cluster="other"}} between '
        f"{start.isoformat()} and {end.isoformat()}"
    ), result.note


def test_a_server_with_only_other_series_says_what_it_holds(k8s: Served, data_dir: Path) -> None:
    server, spec = k8s
    # the filter keeps the pods' series only
    result = _run(data_dir, _cluster(server.url, label_filter='{namespace="team-a"}'), spec)
    assert f"; Prometheus at {server.url} has no series gpuwaste reads " in result.note
    assert "only kube-state-metrics series (4 metric families: kube_pod_completion_time" in (
        result.note
    )
    assert _gpu(data_dir).height == 0


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("gpuwaste")
    return subprocess.run(
        [str(exe), "ingest", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


def test_cli_one_off_and_errors(hpc: Served, data_dir: Path) -> None:
    server, spec = hpc
    start, end = _bounds(spec)
    done = _cli(
        "prometheus",
        "--url", server.url, "--cluster", "c1", "--data-dir", str(data_dir),
        "--since", start.isoformat(), "--until", end.isoformat(), "--quiet",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert _gpu(data_dir).height == spec.planted_gpu_rows
    assert (data_dir / "gpuwaste.duckdb").exists()
    # unreachable server: one sentence naming the URL, non-zero, watermark untouched
    dead = f"http://127.0.0.1:{free_port()}"
    done = _cli(
        "prometheus", "--url", dead, "--cluster", "c2", "--data-dir", str(data_dir), "--quiet"
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and dead in lines[0] and "unreachable" in lines[0], done.stderr
    assert get_watermark(Warehouse(data_dir), "c2", SOURCE) is None
    # a token named by an environment variable that is not set
    env = {k: v for k, v in os.environ.items() if k != "GPUWASTE_TEST_TOKEN"}
    done = _cli(
        "prometheus", "--url", server.url, "--cluster", "c3", "--data-dir", str(data_dir),
        "--token-env", "GPUWASTE_TEST_TOKEN", "--quiet", env=env,
    )  # fmt: skip
    assert done.returncode == 1 and "GPUWASTE_TEST_TOKEN" in done.stderr
    # a second ingest on a locked warehouse says so and exits
    with writer_lock(data_dir):
        done = _cli(
            "prometheus", "--url", server.url, "--cluster", "c1", "--data-dir", str(data_dir)
        )
    assert done.returncode == 1 and "already running" in done.stderr


def test_token_is_sent_and_never_printed(
    hpc: Served, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, spec = hpc
    monkeypatch.setenv("GPUWASTE_TEST_TOKEN", "s3cr3t-t0ken")
    result = _run(data_dir, _cluster(server.url, token_env="GPUWASTE_TEST_TOKEN"), spec)
    assert _gpu(data_dir).height == spec.planted_gpu_rows  # Prometheus ignores the header
    assert "s3cr3t" not in result.summary()
    state = Warehouse(data_dir).read("ingest_state", "c1")
    assert "s3cr3t" not in "".join(state["detail"].to_list())


def test_selection_refused_as_too_large_is_split(tmp_path: Path, data_dir: Path) -> None:
    spec = write_synthetic_openmetrics(Synthetic(points=240, node=False), tmp_path / "m.om")
    with running_prometheus(tmp_path / "m.om", tmp_path / "prom", max_samples=400) as server:
        result = _run(data_dir, _cluster(server.url), spec)
        assert result.written["gpu_samples"] == spec.planted_gpu_rows
    # 2 windows x (1 name lookup + 3 metrics) = 8 requests without splitting
    requests_made = int(result.note.split(" in ")[-1].split(" request")[0])
    assert requests_made > 8, result.note
    gpu = _gpu(data_dir)
    assert gpu.height == spec.planted_gpu_rows
    assert gpu.select("host", "gpu", "ts", "job_id").unique().height == gpu.height


def test_sigkill_at_any_point_loses_and_duplicates_nothing(hpc: Served, tmp_path: Path) -> None:
    """A real `gpuwaste ingest` process, killed with SIGKILL as soon as its first window is
    recorded; whatever it had done by then, the next run ends with every sample exactly once."""
    import signal
    import time

    server, spec = hpc
    data_dir = tmp_path / "wh"
    start, end = _bounds(spec)
    config = tmp_path / "gpuwaste.toml"
    config.write_text(
        f'data_dir = "{data_dir}"\n[[clusters]]\nname = "c1"\n[clusters.prometheus]\n'
        f'url = "{server.url}"\nmax_points_per_query = 100\n'
    )
    exe = Path(sys.executable).with_name("gpuwaste")
    args = [str(exe), "ingest", "--config", str(config), "--quiet", "prometheus"]
    args += ["--since", start.isoformat(), "--until", end.isoformat()]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    state = data_dir / "parquet" / "ingest_state" / "cluster=c1" / "state.parquet"
    deadline = time.monotonic() + 60
    while not state.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    wm = get_watermark(Warehouse(data_dir), "c1", SOURCE)
    partial = _gpu(data_dir)
    assert partial.select("host", "gpu", "ts", "job_id").unique().height == partial.height
    if wm is not None:  # everything before the watermark is there
        before = partial.filter(pl.col("ts") < wm).height
        assert before == _planted_before(spec, wm)
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    gpu = _gpu(data_dir)
    assert gpu.height == spec.planted_gpu_rows
    assert gpu.select("host", "gpu", "ts", "job_id").unique().height == gpu.height


def _planted_before(spec: Synthetic, when: datetime) -> int:
    start, _ = _bounds(spec)
    k_end = int((when - start).total_seconds() // spec.interval_s)
    k_end += 1 if (when - start).total_seconds() % spec.interval_s else 0
    gaps = sum(max(0, min(k1, k_end) - k0) for _h, _g, k0, k1 in spec.gaps if k0 < k_end)
    return spec.hosts * spec.gpus_per_host * min(k_end, spec.points) - gaps


@dataclass
class NumericJobs(Synthetic):
    """The hpc cluster with Slurm-style job ids in `hpc_job` (sacct's ids are numbers)."""

    def job_of(self, h: int, g: int, k: int) -> str | None:
        job = super().job_of(h, g, k)
        return None if job is None else str(1000 + 10 * h + g // 2)


def _sacct_for(spec: Synthetic, path: Path) -> Path:
    """sacct --parsable2 records of the planted jobs: 2 GPUs each, on their host, no indices."""
    start, _ = _bounds(spec)
    lines = ["JobID|JobIDRaw|User|Account|State|Start|End|AllocTRES|NodeList"]
    for job, (k0, k1, n) in sorted(spec.planted_jobs.items()):
        a = start + timedelta(seconds=k0 * spec.interval_s)
        b = start + timedelta(seconds=(k1 + 1) * spec.interval_s)
        host = spec.host((int(job) - 1000) // 10)
        t = "%Y-%m-%dT%H:%M:%S"
        lines.append(f"{job}|{job}|u|a|COMPLETED|{a:{t}}|{b:{t}}|gres/gpu={n}|{host}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_label_jobs_yield_to_slurm_records_in_either_order(tmp_path: Path) -> None:
    """Prometheus one-off (no scheduler configured) and sacct one-off for one cluster: the jobs
    are Slurm's, once, whatever came first and however often Prometheus runs again; Slurm's
    allocations get the GPU indices of the `hpc_job` labels in both orders."""
    spec = write_synthetic_openmetrics(NumericJobs(points=240), tmp_path / "metrics.om")
    slurm = ClusterConfig(name="c1", slurm=SlurmSource(file=_sacct_for(spec, tmp_path / "s.txt")))
    tables: dict[str, dict[str, pl.DataFrame]] = {}
    with running_prometheus(tmp_path / "metrics.om", tmp_path / "prom") as server:
        prom = _cluster(server.url)
        first = tmp_path / "prometheus-first"
        _run(first, prom, spec)
        wh = Warehouse(first)
        assert set(wh.read("jobs", "c1")["source"]) == {"telemetry"}  # no scheduler yet
        ingest_slurm(Settings(data_dir=first), slurm)
        set_watermark(wh, "c1", SOURCE, _bounds(spec)[0])  # rewind: the re-run redoes it all
        _run(first, prom, spec)
        later = tmp_path / "slurm-first"
        ingest_slurm(Settings(data_dir=later), slurm)
        assert Warehouse(later).read("job_gpus", "c1")["gpu"].to_list() == [-1] * 4
        _run(later, prom, spec)
    for name, d in (("first", first), ("later", later)):
        wh = Warehouse(d)
        tables[name] = {t: wh.read(t, "c1").sort(pl.all()) for t in ("jobs", "job_gpus")}
        jobs = tables[name]["jobs"]
        assert jobs["job_id"].to_list() == sorted(spec.planted_jobs), name
        assert set(jobs["source"]) == {"slurm"}, name
        gpus = tables[name]["job_gpus"]
        assert sorted(gpus["gpu"]) == [0, 0, 1, 1, 2, 2, 3, 3], name
    for t in ("jobs", "job_gpus"):
        assert tables["first"][t].equals(tables["later"][t]), t
