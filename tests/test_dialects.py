"""Telemetry dialects (gpuwaste/dialects.py, #43): each exporter's series become the same
`gpu_samples` rows, through the real file source and DuckDB views (and one real Prometheus for
the companion gauge of older Jobstats).

Fixtures (tests/fixtures/exporter_text, README.md there): the four real nvidia_gpu_exporter
scrapes (H100 and L40S, idle and loaded), the slurm-job-exporter README sample, and Jobstats
(both job forms) and AMD exposition written from those exporters' source.
"""

from __future__ import annotations

import math
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest
from harness.prometheus import running_prometheus

from gpuwaste import dialects
from gpuwaste.config import (
    ClusterConfig,
    ConfigError,
    OpenMetricsSource,
    PrometheusLabels,
    PrometheusSource,
    Settings,
    parse_settings,
)
from gpuwaste.ingest.base import IngestError, IngestResult, RunOptions
from gpuwaste.ingest.prometheus.dialect_choice import LeftOut, keep_preferred
from gpuwaste.ingest.prometheus.openmetrics_parse import parse_text
from gpuwaste.ingest.prometheus.openmetrics_source import ingest_openmetrics, run_openmetrics
from gpuwaste.ingest.prometheus.rows import gpu_rows
from gpuwaste.ingest.prometheus.source import ingest_prometheus
from gpuwaste.warehouse.catalog import connect
from tests.conftest import FIXTURES

TEXT = FIXTURES / "exporter_text"
MIB = 1024 * 1024
H100_IDLE = TEXT / "nvidia_gpu_exporter_nvidia_h100_80gb_hbm3_590_48_01_idle.prom"
H100_LOAD = TEXT / "nvidia_gpu_exporter_nvidia_h100_80gb_hbm3_590_48_01_load.prom"
L40S_IDLE = TEXT / "nvidia_gpu_exporter_nvidia_l40s_595_80_idle.prom"
L40S_LOAD = TEXT / "nvidia_gpu_exporter_nvidia_l40s_595_80_load.prom"
SLURM_JOB = TEXT / "slurm_job_exporter_readme_sample.prom"
JOBSTATS_GAUGE = TEXT / "jobstats_nvml_exporter_jobid_gauge.prom"
JOBSTATS_LABEL = TEXT / "jobstats_nvml_exporter_jobid_label.prom"
AMD = TEXT / "amd_device_metrics_exporter_mi300x.prom"
DCGM_L4 = TEXT / "dcgm_exporter_kops_nvidia_l4.prom"
T0 = datetime(2026, 10, 31, 12, 0, tzinfo=UTC)
T1 = datetime(2026, 10, 31, 12, 0, 30, tzinfo=UTC)
ROW = ["host", "gpu", "gpu_minor", "uuid", "gpu_model", "job_id", "ts"]


def ingest(
    path: Path, data_dir: Path, **kw: str | None
) -> tuple[IngestResult, pl.DataFrame, pl.DataFrame]:
    """`ingest openmetrics` of `path` into cluster `c`; (result, gpu_samples, jobs) read back
    through the DuckDB views."""
    result = ingest_openmetrics(Settings(data_dir=data_dir), ClusterConfig(name="c"), path, **kw)
    with connect(data_dir) as con:
        gpu = con.sql("select * from gpu_samples order by host, gpu, ts, job_id").pl()
        jobs = con.sql("select * from jobs order by job_id").pl()
    return result, gpu, jobs


def test_each_metric_family_belongs_to_one_dialect() -> None:
    """Recognition is unambiguous: no family (alternatives included) is declared twice, and
    every marker is a family of its dialect."""
    seen: dict[str, str] = {}
    for d in dialects.DIALECTS:
        assert set(d.markers()) <= set(d.families()), d.name
        for name in d.families():
            assert seen.setdefault(name, d.name) == d.name, (name, seen[name], d.name)
    assert dialects.DEFAULT is dialects.DCGM and dialects.NAMES[0] == "dcgm"
    with pytest.raises(ValueError, match="expected one of dcgm, jobstats, amd"):
        dialects.dialect("prometheus")


@pytest.mark.parametrize(
    ("path", "util", "power_w", "used", "total", "model"),
    [
        (H100_IDLE, 0.0, 69.85, 0, 85520809984, "NVIDIA H100 80GB HBM3"),
        (H100_LOAD, 100.0, 631.95, 20780679168, 85520809984, "NVIDIA H100 80GB HBM3"),
        # the upstream "idle" L40S capture reads 100 % with no memory used, the "load" one 9 %
        (L40S_IDLE, 100.0, 144.97, 0, 48305799168, "NVIDIA L40S"),
        (L40S_LOAD, 9.0, 110.23, 1294991360, 48305799168, "NVIDIA L40S"),
    ],
    ids=["h100-idle", "h100-load", "l40s-idle", "l40s-load"],
)
def test_real_nvidia_smi_scrapes(
    path: Path,
    util: float,
    power_w: float,
    used: int,
    total: int,
    model: str,
    tmp_path: Path,
) -> None:
    result, gpu, jobs = ingest(path, tmp_path, host="ws1")
    assert result.refused == []
    assert result.note == f"{path.name}; telemetry nvidia-smi (recognised from its series)"
    assert gpu.height == 1
    row = gpu.row(0, named=True)
    assert row["util"] == pytest.approx(util) and row["power_w"] == pytest.approx(power_w)
    assert row["mem_used_mib"] == used / MIB and row["mem_total_mib"] == total / MIB
    assert row["util_source"] == "nvidia_smi_utilization_gpu_ratio"
    # index and name from nvidia_smi_gpu_info joined on uuid; no minor number, no job
    assert (row["host"], row["gpu"], row["gpu_model"]) == ("ws1", 0, model)
    assert row["uuid"] == "00000000-0000-0000-0000-000000000000"
    assert row["gpu_minor"] is None and row["job_id"] is None and jobs.height == 0


def test_a_single_host_scrape_without_host_needs_host(tmp_path: Path) -> None:
    with pytest.raises(IngestError, match=r"without a host label .* is read with --host NAME"):
        ingest(H100_LOAD, tmp_path)
    assert not list(tmp_path.rglob("*.parquet"))


def test_jobstats_companion_gauge_names_the_job_by_minor_number(tmp_path: Path) -> None:
    """Older Jobstats: the job is the VALUE of nvidia_gpu_jobId at the same scrape, joined on
    (host, minor_number); 0 is no job. Ordinal and minor number differ here, as they may."""
    result, gpu, jobs = ingest(JOBSTATS_GAUGE, tmp_path, host="della-i14g3")
    assert result.refused == []
    assert "telemetry jobstats (recognised from its series)" in result.note
    got = gpu.select(*ROW, "util", "mem_used_mib", "mem_total_mib", "power_w").rows()
    a100, u0, u1 = "NVIDIA A100-SXM4-80GB", "GPU-5a1b0c6e", "GPU-9f8e7d6c"
    tail = "-1111-2222-3333-444455556666"
    assert got == [
        ("della-i14g3", 0, 1, u0 + tail, a100, "63884791", T0, 87.0, 40960.0, 81920.0, 312.456),
        ("della-i14g3", 0, 1, u0 + tail, a100, "63884791", T1, 91.0, 40960.0, 81920.0, 318.002),
        ("della-i14g3", 1, 0, u1 + tail, a100, None, T0, 0.0, 0.0, 81920.0, 61.234),
        ("della-i14g3", 1, 0, u1 + tail, a100, "63884800", T1, 3.0, 1024.0, 81920.0, 74.5),
    ]
    # no scheduler source: the jobs come from the telemetry
    assert jobs["job_id"].to_list() == ["63884791", "63884800"]


def test_jobstats_jobid_label_gives_the_same_rows_as_the_gauge(tmp_path: Path) -> None:
    _, by_gauge, _ = ingest(JOBSTATS_GAUGE, tmp_path / "a", host="h")
    _, by_label, _ = ingest(JOBSTATS_LABEL, tmp_path / "b", host="h")
    assert by_label.drop("source").equals(by_gauge.drop("source"))


def test_slurm_job_exporter_sample(tmp_path: Path) -> None:
    result, gpu, jobs = ingest(SLURM_JOB, tmp_path, host="node1")
    assert result.refused == []
    assert "telemetry slurm-job-exporter (recognised from its series)" in result.note
    parsed = parse_text(SLURM_JOB.read_text(), default_ts=T0).series
    want = {n: parsed[n].samples["value"].to_list() for n in parsed if n.endswith("_gpu")}
    assert gpu["job_id"].to_list() == ["1", "2", "4"]
    assert gpu["util"].to_list() == want["slurm_job_utilization_gpu"]
    assert gpu["mem_used_mib"].to_list() == [v / MIB for v in want["slurm_job_memory_usage_gpu"]]
    assert gpu["mem_total_mib"].to_list() == [40960.0] * 3
    assert gpu["power_w"].to_list() == pytest.approx([71.994, 72.894, 302.176])
    assert gpu["tensor_active"].to_list() == want["slurm_job_tensor_gpu"]  # already percent
    # `gpu` is the job's own index (all three jobs' GPU 0, at the same time) and no Slurm
    # record names the host's: each job's GPU 0 is a device of its own (job_local_gpus, one
    # slot per job, in order of first sample then job id); no minor number
    assert gpu["gpu"].to_list() == [4096, 4112, 4128] and gpu["gpu_minor"].null_count() == 3
    assert "3 kept on devices of their own" in result.note
    assert set(gpu["gpu_model"]) == {"NVIDIA A100-SXM4-40GB"}
    assert jobs["job_id"].to_list() == ["1", "2", "4"]


def test_amd_device_metrics_exporter(tmp_path: Path) -> None:
    result, gpu, jobs = ingest(AMD, tmp_path)
    assert result.refused == []
    assert "telemetry amd (recognised from its series)" in result.note
    got = gpu.select("host", "gpu", "job_id", "util", "mem_used_mib", "mem_total_mib").rows()
    assert got == [
        ("mi300-node-01", 0, "4242", 97.0, 150512.0, 196592.0),
        ("mi300-node-01", 1, None, 0.0, 283.0, 196592.0),  # job_id="": no job
    ]
    assert gpu["power_w"].to_list() == [684.0, 139.0]
    assert set(gpu["gpu_model"]) == {"AMD Instinct MI300X"}
    assert gpu["uuid"][0] == "5bff74a1-0000-1000-80a3-b4fe5d1e2a01"
    assert jobs["job_id"].to_list() == ["4242"]


def test_amd_metric_names_of_another_release_are_read(tmp_path: Path) -> None:
    """A release (or `MetricsFieldPrefix`) that prefixes the names with `amd_`, and an MI2xx
    that exports GPU_AVERAGE_PACKAGE_POWER instead of GPU_PACKAGE_POWER."""
    text = AMD.read_text().replace("gpu_", "amd_gpu_")
    text = text.replace("amd_gpu_package_power", "amd_gpu_average_package_power")
    text = text.replace("amd_gpu_id=", "gpu_id=").replace("amd_gpu_uuid=", "gpu_uuid=")
    text = text.replace("amd_gpu_partition_id=", "gpu_partition_id=")
    renamed = tmp_path / "amd_old.prom"
    renamed.write_text(text)
    _, want, _ = ingest(AMD, tmp_path / "a")
    _, got, _ = ingest(renamed, tmp_path / "b")
    assert got["util_source"].to_list() == ["amd_gpu_gfx_activity"] * 2
    # no timestamps in the files: each takes its file's modification time
    assert got.drop("util_source", "ts").equals(want.drop("util_source", "ts"))


def test_dcgm_summary_is_as_before_and_gives_the_minor_number(tmp_path: Path) -> None:
    result, gpu, _ = ingest(DCGM_L4, tmp_path)
    assert result.note == DCGM_L4.name  # DCGM alone, the default: nothing more said
    assert gpu["gpu_minor"].to_list() == [0]  # device="nvidia0"


def test_files_written_before_gpu_minor_read_it_as_null(tmp_path: Path) -> None:
    ingest(DCGM_L4, tmp_path)
    (part,) = (tmp_path / "parquet" / "gpu_samples").rglob("*.parquet")
    pl.read_parquet(part).drop("gpu_minor").write_parquet(part)
    with connect(tmp_path) as con:
        assert con.sql("select gpu_minor, util from gpu_samples").fetchall() == [(None, 0.0)]


def _with_instance(path: Path, host: str, out: Path) -> Path:
    """The scrape as Prometheus would store it from `host`: an `instance` label on each series."""
    lines = []
    for line in path.read_text().splitlines():
        if line and not line.startswith("#") and "{" in line:
            line = line.replace("{", f'{{instance="{host}:9835",', 1)
        lines.append(line)
    out.write_text("\n".join(lines) + "\n")
    return out


def test_two_dialects_for_one_gpu_keep_the_richer_and_count_the_other(tmp_path: Path) -> None:
    """DCGM and nvidia-smi's exporter on the same host: GPU 0 of that host comes from DCGM,
    nvidia-smi's sample of it is left out and counted; nvidia-smi's GPU of another host is kept."""
    host = "i-030791dc5a37cd257"  # the DCGM scrape's Hostname
    same = _with_instance(H100_IDLE, host, tmp_path / "same.prom").read_text()
    other = _with_instance(L40S_LOAD, "ws2", tmp_path / "other.prom").read_text()
    both = tmp_path / "both.prom"
    both.write_text(DCGM_L4.read_text() + same + other.replace("00000000-0000", "11111111-0000"))
    result, gpu, _ = ingest(both, tmp_path / "wh")
    assert gpu.select("host", "gpu", "util_source").rows() == [
        (host, 0, "DCGM_FI_PROF_GR_ENGINE_ACTIVE"),
        ("ws2", 0, "nvidia_smi_utilization_gpu_ratio"),
    ]
    assert result.note == (
        "both.prom; telemetry dcgm and nvidia-smi (recognised from its series); nvidia-smi's 1 "
        "sample(s) of 1 GPU(s) that dcgm also gives were left out"
    )
    # named, only that dialect is read
    result, gpu, _ = ingest(both, tmp_path / "wh2", telemetry="nvidia-smi")
    assert gpu["host"].to_list() == [host, "ws2"] and "(--telemetry)" in result.note


def test_a_named_dialect_the_source_does_not_hold_is_one_sentence(tmp_path: Path) -> None:
    with pytest.raises(IngestError) as err:
        ingest(H100_LOAD, tmp_path, telemetry="amd", host="h")
    text = str(err.value)
    assert text.startswith(f"{H100_LOAD} holds no amd telemetry (AMD ROCm device-metrics-exporter)")
    assert "looked for gpu_gfx_activity, amd_gpu_gfx_activity, gpu_used_vram" in text
    assert "nvidia_smi_clocks_current_graphics_clock_hz" in text  # the families present
    assert text.endswith("; nothing was written.") and text.count(". ") == 0
    assert not list(tmp_path.rglob("*.parquet"))


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("gpuwaste")
    return subprocess.run([str(exe), *args], capture_output=True, text=True, check=False)


def test_cli_telemetry_and_host_flags(tmp_path: Path) -> None:
    base = ("ingest", "openmetrics", "--file", str(H100_LOAD), "--cluster", "c")
    done = _cli(*base, "--data-dir", str(tmp_path), "--telemetry", "nvidia-smi", "--host", "n1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("; telemetry nvidia-smi (--telemetry)")
    done = _cli(*base, "--data-dir", str(tmp_path / "x"), "--telemetry", "nvml")
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "gpuwaste: --telemetry: unknown telemetry 'nvml': expected one of dcgm, jobstats, amd, "
        "slurm-job-exporter, nvidia-smi."
    )


def test_the_cluster_s_telemetry_and_host_are_configuration(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path)
    source = OpenMetricsSource(file=H100_LOAD, host="n1")
    cluster = ClusterConfig(name="c", telemetry="nvidia-smi", openmetrics=source)
    result = run_openmetrics(settings, cluster, RunOptions())
    assert result.note.endswith("; telemetry nvidia-smi (configured)")
    with pytest.raises(IngestError, match="holds no jobstats telemetry"):  # the flag wins
        run_openmetrics(settings, cluster, RunOptions(telemetry="jobstats"))
    with pytest.raises(ConfigError) as err:
        parse_settings({"clusters": [{"name": "c", "telemetry": "nvml"}]}, "g.toml")
    assert str(err.value) == (
        "g.toml: key 'clusters.0.telemetry': unknown telemetry 'nvml': expected one of dcgm, "
        "jobstats, amd, slurm-job-exporter, nvidia-smi, got 'nvml'."
    )


# One line of a dialect's series with the labels naming a GPU (and for nvidia-smi its info).
_LABELS = {
    "jobstats": ('{minor_number="0",name="X",ordinal="0",uuid="GPU-a",instance="h:9445"}', ""),
    "slurm-job-exporter": ('{gpu="0",gpu_type="X",slurmjobid="5",instance="h:9798"}', ""),
    "nvidia-smi": (
        '{uuid="u0",instance="h:9835"}',
        'nvidia_smi_gpu_info{uuid="u0",index="0",name="X",instance="h:9835"} 1 1793448000000\n',
    ),
    "amd": ('{gpu_id="0",hostname="h",job_id="1"}', ""),
}


@pytest.mark.parametrize("name", sorted(_LABELS))
def test_bad_values_are_refused_per_dialect_as_dcgm_s_are(name: str) -> None:
    """Negative, above the metric's range, NaN: refused with the reason, the other readings of
    the same instant kept."""
    d = dialects.dialect(name)
    labels, info = _LABELS[name]
    util = d.util[0]
    good = 0.5 * util.maximum
    values = [good, -1.0, 2 * util.maximum, math.nan]
    times = [1793448000000 + 15000 * k for k in range(4)]
    lines = [f"{util.name}{labels} {v} {t}" for v, t in zip(values, times, strict=True)]
    lines += [f"{d.mem_used.name}{labels} 1048576 {t}" for t in times]
    parsed = parse_text(info + "\n".join(lines) + "\n")
    rows = gpu_rows(parsed.series, PrometheusLabels(), source="t", dialect=d)
    reasons = sorted(r.reason for r in rows.refused)
    assert reasons == sorted(
        [
            f"negative: {util.name}",
            f"above range: more than {util.maximum:g}: {util.name}",
            f"NaN: {util.name}",
        ]
    )
    assert rows.frame.height == 4
    assert rows.frame["util"].drop_nulls().to_list() == [good * util.scale]


def _openmetrics_of(path: Path, host: str, out: Path) -> Path:
    """A Prometheus-text scrape log -> OpenMetrics that promtool backfills (one block per
    family, seconds), each series labelled `instance` as Prometheus would."""
    parsed = parse_text(path.read_text())
    lines = []
    for name, s in parsed.series.items():
        lines.append(f"# TYPE {name} gauge")
        for sid, labels in enumerate(s.labels):
            inner = ",".join(f'{k}="{v}"' for k, v in {**labels, "instance": host}.items())
            for ts, text in s.samples.filter(pl.col("sid") == sid).select("ts", "text").rows():
                lines.append(f"{name}{{{inner}}} {text} {ts.timestamp():.0f}")
    out.write_text("\n".join(lines) + "\n# EOF\n")
    return out


@pytest.mark.prometheus
def test_jobstats_gauge_through_a_real_prometheus(tmp_path: Path) -> None:
    """The Prometheus source also queries the companion gauge, and joins it as the file does."""
    om = _openmetrics_of(JOBSTATS_GAUGE, "della-i14g3:9445", tmp_path / "j.om")
    _, want, _ = ingest(JOBSTATS_GAUGE, tmp_path / "file", host="della-i14g3")
    with running_prometheus(om, tmp_path / "prom") as server:
        cluster = ClusterConfig(
            name="c", prometheus=PrometheusSource(url=server.url, retries=1, scrape_interval_s=30)
        )
        result = ingest_prometheus(
            Settings(data_dir=tmp_path / "wh"),
            cluster,
            since=T0,
            until=datetime(2026, 10, 31, 12, 5, tzinfo=UTC),
            quiet=True,
        )
        with pytest.raises(IngestError, match=r"Prometheus at .* holds no amd telemetry"):
            ingest_prometheus(
                Settings(data_dir=tmp_path / "none"), cluster, since=T0, quiet=True, telemetry="amd"
            )
    assert not list((tmp_path / "none").rglob("*.parquet"))
    assert "telemetry jobstats (recognised from its series)" in result.note
    with connect(tmp_path / "wh") as con:
        got = con.sql("select * from gpu_samples order by host, gpu, ts, job_id").pl()
    assert got.select(ROW).rows() == want.select(ROW).rows()
    assert got["util"].to_list() == want["util"].to_list()


DOC = Path(__file__).resolve().parent.parent / "docs" / "ingest-prometheus.md"


def _doc_line(start: str) -> str:
    (line,) = [ln for ln in DOC.read_text().splitlines() if ln.startswith(start)]
    return line.removeprefix("gpuwaste: ")


def test_the_docs_show_the_sentences_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/ingest-prometheus.md's examples: a named dialect absent, and a slurm-job-exporter
    scrape without its GPU series (its cgroup families only)."""
    monkeypatch.chdir(tmp_path)
    Path("l4.prom").write_text(DCGM_L4.read_text())
    with pytest.raises(IngestError) as err:
        ingest(Path("l4.prom"), tmp_path / "a", telemetry="amd")
    assert str(err.value) == _doc_line("gpuwaste: l4.prom holds no amd telemetry")
    lines = SLURM_JOB.read_text().splitlines()
    Path("slurm_job_exporter.prom").write_text("\n".join(ln for ln in lines if "_gpu" not in ln))
    with pytest.raises(IngestError) as err:
        ingest(Path("slurm_job_exporter.prom"), tmp_path / "b")
    assert str(err.value) == _doc_line("gpuwaste: slurm_job_exporter.prom holds")


def test_keep_preferred_matches_by_index_uuid_or_host_for_job_local_indices() -> None:
    """The same GPU: same host and index, or same uuid; a job-local index (slurm-job-exporter)
    matches no index, so a host a preferred dialect gives leaves out all its rows there."""

    def frame(rows: list[tuple[str, int, str | None]]) -> pl.DataFrame:
        schema = {"host": pl.String, "gpu": pl.Int16, "uuid": pl.String}
        return pl.DataFrame(rows, schema=schema, orient="row")

    dcgm = frame([("a", 0, "GPU-1"), ("a", 1, "GPU-2")])
    smi = frame([("a", 1, None), ("a", 5, "GPU-1"), ("a", 2, "GPU-3"), ("b", 0, None)])
    sje = frame([("a", 7, None), ("c", 0, None)])
    left_out = LeftOut()
    kept = keep_preferred(
        [(dialects.DCGM, dcgm), (dialects.NVIDIA_SMI, smi), (dialects.SLURM_JOB_EXPORTER, sje)],
        left_out,
    )
    assert kept.rows() == [*dcgm.rows(), ("a", 2, "GPU-3"), ("b", 0, None), ("c", 0, None)]
    assert left_out.samples == {"nvidia-smi": 2, "slurm-job-exporter": 1}


def test_jobstats_current_exporter_mig_devices_and_gpm(tmp_path: Path) -> None:
    """The exporter's current labels (`GPU_I_ID`, `jobid`, `userid`): a GPU in MIG mode has no
    duty cycle; its MIG devices (NVML names them "<model> MIG <profile>") are devices of their
    own with GPM's sm_util_percent as utilization; a whole GPU prefers GPM over the duty cycle."""

    def line(metric: str, ordinal: int, inst: str, name: str, job: str, value: float) -> str:
        labels = (
            f'GPU_I_ID="{inst}",instance="della-l01g1:9445",jobid="{job}",'
            f'minor_number="{ordinal}",name="{name}",ordinal="{ordinal}",'
            f'userid="",uuid="GPU-{ordinal}-{inst}"'
        )
        return f"nvidia_gpu_{metric}{{{labels}}} {value} 1793448000000"

    a100 = "NVIDIA A100-SXM4-80GB"
    text = "\n".join(
        [
            line("memory_used_bytes", 0, "", a100, "", 20 * MIB),  # the MIG-mode parent
            line("memory_used_bytes", 0, "2", f"{a100} MIG 3g.40gb", "71", 1024 * MIB),
            line("sm_util_percent", 0, "2", f"{a100} MIG 3g.40gb", "71", 42.5),
            line("memory_used_bytes", 0, "9", f"{a100} MIG 1g.10gb", "", 0),
            line("memory_used_bytes", 1, "", a100, "72", 2048 * MIB),
            line("duty_cycle", 1, "", a100, "72", 88),
            line("sm_util_percent", 1, "", a100, "72", 61.25),
            line("any_tensor_util_percent", 1, "", a100, "72", 12.5),
        ]
    )
    rows = gpu_rows(
        parse_text(text + "\n").series, PrometheusLabels(), source="t", dialect=dialects.JOBSTATS
    )
    assert rows.refused == []
    got = rows.frame.sort("gpu", "gpu_instance", nulls_last=False)
    cols = ["gpu", "gpu_instance", "mig_profile", "gpu_model", "job_id", "util", "util_source"]
    assert got.select(cols).rows() == [
        (0, None, None, a100, None, None, None),
        (0, 2, "3g.40gb", a100, "71", 42.5, "nvidia_gpu_sm_util_percent"),
        (0, 9, "1g.10gb", a100, None, None, None),
        (1, None, None, a100, "72", 61.25, "nvidia_gpu_sm_util_percent"),
    ]
    assert got["sm_active"].to_list() == [None, 42.5, None, 61.25]
    assert got["tensor_active"].to_list() == [None, None, None, 12.5]
    assert got["gpu_minor"].to_list() == [0, 0, 0, 1]
