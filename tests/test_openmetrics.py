"""The OpenMetrics / Prometheus text parser, on real exporter output and hand-written edge cases."""

from __future__ import annotations

import gzip
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuwaste.config import ClusterConfig, OpenMetricsSource, PrometheusLabels, Settings
from gpuwaste.ingest.base import IngestError
from gpuwaste.ingest.prometheus.openmetrics_parse import parse_labels, parse_text
from gpuwaste.ingest.prometheus.openmetrics_source import ingest_openmetrics
from gpuwaste.ingest.prometheus.rows import gpu_rows
from gpuwaste.warehouse.store import Warehouse
from tests.conftest import FIXTURES

EXPORTER = FIXTURES / "exporter_text"
SCRAPED = datetime(2026, 11, 1, tzinfo=UTC)


def test_dcgm_exporter_scrape_becomes_one_gpu_row() -> None:
    text = (EXPORTER / "dcgm_exporter_kops_nvidia_l4.prom").read_text()
    parsed = parse_text(text, location="l4", default_ts=SCRAPED)
    assert parsed.refused == []
    assert "DCGM_FI_DEV_GPU_UTIL" in parsed.series
    rows = gpu_rows(parsed.series, PrometheusLabels(), source="openmetrics")
    assert rows.refused == []
    row = rows.frame.row(0, named=True)
    assert rows.frame.height == 1
    assert row["host"] == "i-030791dc5a37cd257" and row["gpu"] == 0
    assert row["uuid"] == "GPU-c2f76b33-7953-256e-8f33-1343419b1a1c"
    # DCGM_FI_PROF_GR_ENGINE_ACTIVE is exported (all zero): it wins over DCGM_FI_DEV_GPU_UTIL
    assert row["util_source"] == "DCGM_FI_PROF_GR_ENGINE_ACTIVE" and row["util"] == 0.0
    assert row["power_w"] == pytest.approx(16.365)
    fb = {
        n: parsed.series[n].samples["value"][0]
        for n in ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED")
    }
    assert row["mem_total_mib"] == sum(fb.values())
    assert row["ts"] == SCRAPED and row["job_id"] is None


def test_readme_excerpt_elisions_are_refused_with_line_numbers() -> None:
    text = (EXPORTER / "dcgm_exporter_readme_k8s_excerpt.prom").read_text()
    parsed = parse_text(text, location="readme", default_ts=SCRAPED)
    assert [r.location for r in parsed.refused] == ["readme:7", "readme:11"]
    temp = parsed.series["DCGM_FI_DEV_MEMORY_TEMP"]
    assert temp.labels[0] == {
        "gpu": "0",
        "UUID": "GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52",
        "container": "",
        "namespace": "",
        "pod": "",
    }
    assert temp.samples["text"][0] == "9223372036854775794"


def test_slurm_job_exporter_labels_with_spaces_and_exponents() -> None:
    text = (EXPORTER / "slurm_job_exporter_readme_sample.prom").read_text()
    parsed = parse_text(text, location="sje", default_ts=SCRAPED)
    assert parsed.refused == []
    models = {lb.get("gpu_type") for s in parsed.series.values() for lb in s.labels}
    assert "NVIDIA A100-SXM4-40GB" in models
    values = pl.concat([s.samples for s in parsed.series.values()])
    assert values["value"].null_count() == 0
    assert max(values["value"].to_list()) > 1e10  # 3.4748194816e+010


def test_timestamps_seconds_in_openmetrics_and_ms_in_prometheus_text() -> None:
    om = 'DCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="h"} 5 1790000000.5\n# EOF\n'
    prom = 'DCGM_FI_DEV_GPU_UTIL{gpu="0",Hostname="h"} 5 1790000000500\n'
    for text in (om, prom):
        ts = parse_text(text).series["DCGM_FI_DEV_GPU_UTIL"].samples["ts"][0]
        assert ts == datetime(2026, 9, 21, 14, 13, 20, 500000, tzinfo=UTC)
    missing = parse_text('up{a="b"} 1\n')
    assert missing.series["up"].n_samples == 0
    assert [r.reason for r in missing.refused] == ["sample without timestamp"]


def test_bad_values_are_refused_by_the_row_builder() -> None:
    lines = [
        f'{m}{{gpu="{g}",Hostname="h"}} {v} 1790000000'
        for m, g, v in [
            ("DCGM_FI_DEV_GPU_UTIL", 0, "NaN"),
            ("DCGM_FI_DEV_GPU_UTIL", 1, "-1"),
            ("DCGM_FI_DEV_GPU_UTIL", 2, "101"),
            ("DCGM_FI_DEV_GPU_UTIL", 3, "+Inf"),
            ("DCGM_FI_DEV_GPU_UTIL", 4, "abc"),
            ("DCGM_FI_DEV_GPU_UTIL", 5, "100"),
            ("DCGM_FI_DEV_FB_USED", 5, "9223372036854775794"),
        ]
    ]
    parsed = parse_text(
        "\n".join([*lines, 'DCGM_FI_DEV_GPU_UTIL{gpu="x",Hostname="h"} 1 1790000000', "# EOF"])
    )
    rows = gpu_rows(parsed.series, PrometheusLabels(), source="t")
    reasons = sorted(r.reason.split(":")[0] for r in rows.refused)
    assert reasons == [
        "NaN",
        "above range",
        "above range",
        "infinite",
        "negative",
        "no GPU index in label 'gpu'",
        "not a number",
    ]
    assert rows.frame.height == 1
    assert rows.frame.row(0, named=True)["util"] == 100.0


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(
        st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,8}", fullmatch=True),
        st.text(max_size=20),
        max_size=5,
    )
)
def test_label_values_round_trip(labels: dict[str, str]) -> None:
    def esc(v: str) -> str:
        return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    inner = ", ".join(f'{k}="{esc(v)}"' for k, v in labels.items())
    assert parse_labels(inner) == labels
    text = f"m{{{inner}}} 1 1790000000\n# EOF\n"
    parsed = parse_text(text)
    assert parsed.refused == []
    assert parsed.series["m"].labels == [labels]


def test_openmetrics_source_reads_gzip_and_rejects_a_wrong_file(tmp_path: Path) -> None:
    text = "\n".join(
        f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",Hostname="h",hpc_job="7"}} {k} {1790000000 + 15 * k}'
        for k in range(10)
    )
    path = tmp_path / "m.om.gz"
    path.write_bytes(gzip.compress((text + "\n# EOF\n").encode()))
    cluster = ClusterConfig(name="x", openmetrics=OpenMetricsSource(file=path))
    settings_ = Settings(data_dir=tmp_path / "wh")
    ingest_openmetrics(settings_, cluster, path)
    ingest_openmetrics(settings_, cluster, path)
    wh = Warehouse(tmp_path / "wh")
    assert wh.read("gpu_samples", "x").height == 10
    jobs = wh.read("jobs", "x")
    assert jobs["job_id"].to_list() == ["7"] and jobs["gpus"].to_list() == [1]
    wrong = tmp_path / "sacct.txt"
    wrong.write_text("JobID|State\n1|COMPLETED\n")
    with pytest.raises(IngestError, match="is not OpenMetrics text"):
        ingest_openmetrics(settings_, cluster, wrong)
    with pytest.raises(IngestError, match="does not exist"):
        ingest_openmetrics(settings_, cluster, tmp_path / "nope.om")


def test_cli_openmetrics_one_off(tmp_path: Path) -> None:
    import subprocess
    import sys

    path = tmp_path / "m.om"
    path.write_text(
        "\n".join(
            f'DCGM_FI_DEV_GPU_UTIL{{gpu="1",hostname="h2"}} {k} {1790000000 + 15 * k}'
            for k in range(4)
        )
        + "\n# EOF\n"
    )
    exe = str(Path(sys.executable).with_name("gpuwaste"))
    args = [exe, "ingest", "openmetrics", "--cluster", "c", "--data-dir", str(tmp_path / "wh")]
    done = subprocess.run([*args, "--file", str(path)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "4 records accepted, 0 quarantined" in done.stdout
    assert Warehouse(tmp_path / "wh").read("gpu_samples", "c")["host"].unique().to_list() == ["h2"]
    bad = subprocess.run(
        [*args, "--file", str(tmp_path / "missing.om")], capture_output=True, text=True, check=False
    )
    assert bad.returncode == 1
    assert bad.stderr.strip().splitlines() == [
        f"gpuwaste: OpenMetrics file {tmp_path / 'missing.om'} does not exist."
    ]
