"""The coarse busy metric beside the best utilization (#44): gpu_samples.gpu_util is the
dialect's `gpu_util` utilization ("a kernel ran in the period": DCGM_FI_DEV_GPU_UTIL,
nvidia-smi's utilization.gpu), kept where `util` takes a finer metric (SM activity), so a busy
loop (GPU_UTIL 100, SM activity 1 %) can be told from work. Declared once in gpuwaste/dialects.py
(UtilSeries.column), read through it for every dialect."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpuwaste.config import PrometheusLabels
from gpuwaste.ingest.prometheus.openmetrics_parse import parse_text
from gpuwaste.ingest.prometheus.rows import gpu_rows
from tests.conftest import FIXTURES

SCRAPED = datetime(2026, 11, 1, tzinfo=UTC)
GPU = 'Hostname="n1",gpu="0",UUID="GPU-a",modelName="NVIDIA H100 80GB HBM3",hpc_job="7"'
MIG = (
    GPU.replace('gpu="0"', 'gpu="1"').replace("GPU-a", "GPU-b")
    + ',GPU_I_ID="3",GPU_I_PROFILE="1g.10gb"'
)
BUSY_LOOP = f"""\
DCGM_FI_DEV_GPU_UTIL{{{GPU}}} 100
DCGM_FI_PROF_SM_ACTIVE{{{GPU}}} 0.01
DCGM_FI_DEV_FB_USED{{{GPU}}} 1024
DCGM_FI_DEV_FB_FREE{{{GPU}}} 80000
DCGM_FI_DEV_GPU_UTIL{{{MIG}}} 0
DCGM_FI_PROF_SM_ACTIVE{{{MIG}}} 0.5
DCGM_FI_DEV_FB_USED{{{MIG}}} 2048
DCGM_FI_DEV_FB_FREE{{{MIG}}} 8000
"""  # fmt: skip


def _rows(text: str) -> dict[int, dict[str, object]]:
    parsed = parse_text(text, location="t", default_ts=SCRAPED)
    assert parsed.refused == []
    rows = gpu_rows(parsed.series, PrometheusLabels(), source="openmetrics")
    assert rows.refused == []
    return {r["gpu"]: r for r in rows.frame.iter_rows(named=True)}


def test_a_busy_loop_keeps_gpu_util_100_beside_sm_activity() -> None:
    row = _rows(BUSY_LOOP)[0]
    assert row["util_source"] == "DCGM_FI_PROF_SM_ACTIVE"
    assert row["util"] == pytest.approx(1.0)
    assert row["gpu_util"] == 100.0


def test_a_mig_instance_has_no_gpu_util() -> None:
    """DCGM's GPU_UTIL reads 0 on a MIG instance (dcgm-exporter#216): not its coarse metric."""
    row = _rows(BUSY_LOOP)[1]
    assert row["gpu_instance"] == 3 and row["util"] == pytest.approx(50.0)
    assert row["gpu_util"] is None


def test_a_real_dcgm_scrape_keeps_its_gpu_util() -> None:
    text = (FIXTURES / "exporter_text" / "dcgm_exporter_kops_nvidia_l4.prom").read_text()
    parsed = parse_text(text, location="l4", default_ts=SCRAPED)
    row = gpu_rows(parsed.series, PrometheusLabels(), source="openmetrics").frame.row(0, named=True)
    assert row["util_source"] == "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
    assert row["gpu_util"] == parsed.series["DCGM_FI_DEV_GPU_UTIL"].samples["value"][0]


def test_without_a_coarse_metric_gpu_util_is_null() -> None:
    text = "\n".join(line for line in BUSY_LOOP.splitlines() if "GPU_UTIL" not in line) + "\n"
    assert _rows(text)[0]["gpu_util"] is None
