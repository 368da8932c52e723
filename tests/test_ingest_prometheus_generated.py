"""The project's generated cluster, backfilled into a real Prometheus, ingested against its truth.

Also: the `openmetrics` file source reads the same file to exactly the same rows (the demo's
path, no server).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from harness.prometheus import PrometheusServer, running_prometheus

from gpuwaste.config import ClusterConfig, OpenMetricsSource, PrometheusSource, Settings
from gpuwaste.generate import GeneratorSpec, write_all
from gpuwaste.ingest.prometheus.openmetrics_source import ingest_openmetrics
from gpuwaste.ingest.prometheus.source import ingest_prometheus
from gpuwaste.warehouse.store import Warehouse

pytestmark = pytest.mark.prometheus

SPEC = GeneratorSpec(seed=7, gpus=16, days=0.25)


def _iso(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


@pytest.fixture(scope="module")
def generated(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[PrometheusServer, Path, dict[str, Any]]]:
    out = tmp_path_factory.mktemp("gen")
    write_all(SPEC, out)
    truth = json.loads((out / "truth.json").read_text())
    with running_prometheus(out / "metrics.om", out / "prom") as server:
        yield server, out, truth


def _ingest(server: PrometheusServer, data_dir: Path, truth: dict[str, Any]) -> Warehouse:
    cluster = ClusterConfig(name=SPEC.cluster, prometheus=PrometheusSource(url=server.url))
    ingest_prometheus(
        Settings(data_dir=data_dir),
        cluster,
        since=_iso(truth["window"]["start"]),
        until=_iso(truth["window"]["end"]),
        quiet=True,
        window_s=3600,
    )
    return Warehouse(data_dir)


def test_generated_samples_arrive_once_and_gaps_stay_gaps(
    generated: tuple[PrometheusServer, Path, dict[str, Any]], data_dir: Path
) -> None:
    server, _, truth = generated
    wh = _ingest(server, data_dir, truth)
    gpu = wh.read("gpu_samples", SPEC.cluster)
    assert gpu.height == truth["openmetrics_samples"]["DCGM_FI_DEV_GPU_UTIL"]
    assert gpu.select("host", "gpu", "ts").unique().height == gpu.height
    assert gpu["util"].null_count() == 0 and gpu["mem_total_mib"].unique().to_list() == [
        SPEC.gpu_mem_mib
    ]
    host = wh.read("host_samples", SPEC.cluster)
    assert host.height == truth["openmetrics_samples"]["node_memory_MemTotal_bytes"]
    for gap in truth["gaps"]:
        inside = gpu.filter(
            (pl.col("host") == gap["host"])
            & (pl.col("gpu") == gap["gpu"])
            & (pl.col("ts") >= _iso(gap["start"]))
            & (pl.col("ts") < _iso(gap["end"]))
        )
        assert inside.height == 0
    # jobs from the hpc_job labels: every job that has samples, with its GPUs
    with_samples = {j["job_id"]: j for j in truth["jobs"] if j.get("n_samples")}
    spans = wh.read("job_gpus", SPEC.cluster)
    assert set(spans["job_id"].unique()) == set(with_samples)
    for job_id, job in list(with_samples.items())[:20]:
        got = spans.filter(pl.col("job_id") == job_id)
        assert {(r["host"], r["gpu"]) for r in got.iter_rows(named=True)} == {
            (a["host"], a["gpu"]) for a in job["alloc"]
        }


def test_openmetrics_file_gives_the_same_rows(
    generated: tuple[PrometheusServer, Path, dict[str, Any]], tmp_path: Path
) -> None:
    server, out, truth = generated
    via_server = _ingest(server, tmp_path / "a", truth).read("gpu_samples", SPEC.cluster)
    cluster = ClusterConfig(
        name=SPEC.cluster, openmetrics=OpenMetricsSource(file=out / "metrics.om")
    )
    settings = Settings(data_dir=tmp_path / "b")
    ingest_openmetrics(settings, cluster, out / "metrics.om")
    ingest_openmetrics(settings, cluster, out / "metrics.om")  # twice: nothing doubles
    via_file = Warehouse(tmp_path / "b").read("gpu_samples", SPEC.cluster)
    cols = ["host", "gpu", "ts", "util", "mem_used_mib", "mem_total_mib", "job_id", "uuid"]
    a = via_server.select(cols).sort("host", "gpu", "ts")
    b = via_file.select(cols).sort("host", "gpu", "ts")
    assert a.equals(b)
    hosts_a = (
        Warehouse(tmp_path / "a")
        .read("host_samples", SPEC.cluster)
        .drop("source")
        .sort("host", "ts")
    )
    hosts_b = (
        Warehouse(tmp_path / "b")
        .read("host_samples", SPEC.cluster)
        .drop("source")
        .sort("host", "ts")
    )
    assert hosts_a.equals(hosts_b)
