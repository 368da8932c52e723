"""Round trip of the generated OpenMetrics through promtool backfill and a real Prometheus.

promtool exits 0 while silently dropping out-of-order samples, so the check that counts is the
number of samples Prometheus serves back.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from harness.prometheus import running_prometheus

from gpuwaste.generate import GeneratorSpec, write_all

pytestmark = [pytest.mark.prometheus]

SPEC = GeneratorSpec(seed=2, gpus=16, days=0.5)


def ep(s: str) -> int:
    return int(datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp())


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, Any]]]:
    d = tmp_path_factory.mktemp("prom")
    write_all(SPEC, d / "gen")
    truth = json.loads((d / "gen" / "truth.json").read_text())
    with running_prometheus(d / "gen" / "metrics.om", d / "server") as prom:
        yield prom.url, truth


def query(url: str, q: str, at: int) -> list[dict[str, Any]]:
    params = urllib.parse.urlencode({"query": q, "time": str(at)})
    with urllib.request.urlopen(f"{url}/api/v1/query?{params}", timeout=30) as r:
        body = json.load(r)
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def test_prometheus_serves_every_sample_written(served: tuple[str, dict[str, Any]]) -> None:
    url, truth = served
    end = ep(truth["window"]["end"])  # exclusive: the last sample is one interval before
    rng = f"[{SPEC.duration_s + 3600}s]"
    written = truth["openmetrics_samples"]
    for family in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
                   "node_cpu_seconds_total", "node_memory_MemAvailable_bytes"):  # fmt: skip
        res = query(url, f"sum(count_over_time({family}{rng}))", end)
        assert int(float(res[0]["value"][1])) == written[family], family
    # one series per (job, GPU) with an hpc_job label, as dcgm-exporter's HPC mode
    res = query(url, f'count(count_over_time(DCGM_FI_DEV_GPU_UTIL{{hpc_job!=""}}{rng}))', end)
    expected = sum(len(j["alloc"]) for j in truth["jobs"] if j["n_samples"] > 0)
    assert int(float(res[0]["value"][1])) == expected


def test_gaps_are_missing_in_prometheus(served: tuple[str, dict[str, Any]]) -> None:
    url, truth = served
    end = ep(truth["window"]["end"])
    gap = truth["gaps"][0]
    sel = f'DCGM_FI_DEV_GPU_UTIL{{Hostname="{gap["host"]}",gpu="{gap["gpu"]}"}}[{SPEC.duration_s + 3600}s]'
    stamps = sorted(int(float(t)) for s in query(url, sel, end) for t, _ in s["values"])
    assert len(stamps) == SPEC.n_samples - (ep(gap["end"]) - ep(gap["start"])) // SPEC.interval_s
    assert not [t for t in stamps if ep(gap["start"]) <= t < ep(gap["end"])]
    assert len(set(stamps)) == len(stamps)  # series of one GPU never overlap in time
