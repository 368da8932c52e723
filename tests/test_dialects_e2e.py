"""Every telemetry dialect, end to end: one generated cluster written in each dialect
(`gpuwaste generate --telemetry NAME`), ingested with its sacct file (and its scontrol captures
where the series do not name the job) through `ingest openmetrics` and through a real Prometheus
(promtool backfill), analyzed, gives the per-job figures of the DCGM-with-`hpc_job` run of the
same cluster.

Exactly (the same floats up to summation order, 1e-9) where the dialect carries the same
information: every dialect's utilization is the same integer percent and its memory the same
MiB, nvidia-smi's ratio included (an integer percent / 100 reads back within 1e-9 of it).
Lossier:
- slurm-job-exporter's `gpu` is the job's own index and no Slurm record here names the host's:
  per-job figures are exact, each job's GPUs a device of its own per host (`job_local_gpus`:
  gpu >= JOB_LOCAL_BASE, the job's index in it), never shared with a concurrent job;
- where only scontrol captures tie jobs to GPUs (DCGM without `hpc_job`, nvidia-smi), a job that
  starts and ends between two captures (5 minutes apart) and holds no whole host is not tied:
  its GPU time is missing, at most MISS_MAX of the cluster's. Every job a capture saw, and every
  whole-host job, is tied to exactly its GPUs and has the reference's figures;
- nvidia-smi gives no device minor number, and the generated `IDX` is one (gres.conf naming
  `/dev/nvidiaN`): the site says `gres_idx = "index"` (right where gres.conf lists the GPUs in
  NVML order, as AutoDetect=nvml does), which ties every job on a host whose minor numbers are
  its indices, and ties the jobs holding part of a host whose minor numbers differ to the wrong
  GPUs: those are left out of the comparison and counted (`misplaced`).

Per path, one warehouse with one cluster per variant, one `run_configured` and one `analyze` for
all, compared with its own DCGM cluster (the paths differ only in a running job's end: up to the
last sample or up to the window's end); one Prometheus for all the variants, each file
backfilled with a label naming its variant.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from harness.prometheus import running_prometheus, with_label

from gpuwaste.analyses.run import analyze
from gpuwaste.config import (
    ClusterConfig,
    OpenMetricsSource,
    PrometheusSource,
    Settings,
    SlurmSource,
)
from gpuwaste.generate import GeneratorSpec, write_all
from gpuwaste.ingest.base import RunOptions
from gpuwaste.ingest.job_local_gpus import JOB_LOCAL_BASE, SLOT_GPUS
from gpuwaste.ingest.run import run_configured
from gpuwaste.ingest.sources import SOURCES
from gpuwaste.warehouse.store import Warehouse

pytestmark = pytest.mark.prometheus

SPEC = GeneratorSpec(seed=11, gpus=16, days=0.2)
MISS_MAX = 0.03  # the bound on GPU time left out by captures 5 minutes apart
TOL = 1e-9
LABEL = "gen_variant"  # the label that tells the variants apart in the one Prometheus
FIGURES = (
    "gpus", "n_hosts", "duration_s", "gpu_s", "observed_share", "util_mean", "util_max",
    "mem_util_mean", "mem_util_max", "idle_slot_gpu_s", "idle_slots", "never_used_gpu_s",
    "never_used_gpus", "idle_share", "n_phases", "n_stable_phases", "phase_level_spread_mib",
    "fluctuating", "checkpointing", "diagnoses", "cpu_util_mean", "host_mem_util_mean",
)  # fmt: skip


@dataclass(frozen=True)
class Variant:
    name: str  # also the cluster's name in the warehouse (with a path suffix)
    telemetry: str
    job_labels: bool = True
    gres_idx: str = "minor"  # what Slurm's IDX is ([clusters.slurm] gres_idx)


VARIANTS = (
    Variant("dcgm", "dcgm"),  # the reference
    Variant("dcgm-no-job-labels", "dcgm", job_labels=False),
    Variant("jobstats", "jobstats"),
    Variant("jobstats-gauge", "jobstats", job_labels=False),
    Variant("slurm-job-exporter", "slurm-job-exporter"),
    Variant("nvidia-smi", "nvidia-smi", gres_idx="index"),
    Variant("amd", "amd"),
)


@dataclass
class Site:
    data_dir: Path
    path: str  # openmetrics | prometheus
    truth: dict[str, dict[str, Any]]  # variant -> truth.json


def _iso(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("dialects")
    outs: dict[str, Path] = {}
    for v in VARIANTS:
        out = base / v.name
        write_all(replace(SPEC, telemetry=v.telemetry, job_labels=v.job_labels), out)
        outs[v.name] = out
    return outs


def _slurm(out: Path, v: Variant) -> SlurmSource:
    scontrol = out / "scontrol" if (out / "scontrol").exists() else None
    return SlurmSource(file=out / "sacct.txt", scontrol_file=scontrol, gres_idx=v.gres_idx)


def _build(outs: dict[str, Path], path: str, data_dir: Path, url: str = "") -> Site:
    """Every variant as a cluster of one warehouse, ingested by the configured sources (the
    telemetry, then Slurm) and analyzed once."""
    truth = {name: json.loads((out / "truth.json").read_text()) for name, out in outs.items()}
    clusters = []
    for v in VARIANTS:
        out = outs[v.name]
        telemetry: dict[str, Any] = (
            {"openmetrics": OpenMetricsSource(file=out / "metrics.om")}
            if path == "openmetrics"
            else {"prometheus": PrometheusSource(url=url, label_filter=f'{{{LABEL}="{v.name}"}}')}
        )
        clusters.append(
            ClusterConfig(name=v.name, telemetry=v.telemetry, slurm=_slurm(out, v), **telemetry)
        )
    settings = Settings(data_dir=data_dir, clusters=clusters)
    window = truth["dcgm"]["window"]
    options = RunOptions(quiet=True, since=_iso(window["start"]), until=_iso(window["end"]))
    run_configured(settings, SOURCES, options)
    analyze(settings, quiet=True)
    return Site(data_dir, path, truth)


@pytest.fixture(scope="module")
def openmetrics_site(generated: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Site:
    return _build(generated, "openmetrics", tmp_path_factory.mktemp("om") / "data")


@pytest.fixture(scope="module")
def prometheus_site(
    generated: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Site]:
    """One Prometheus for every variant: each file backfilled with LABEL naming its variant."""
    base = tmp_path_factory.mktemp("prom")
    files = [
        with_label(generated[v.name] / "metrics.om", base / f"{v.name}.om", LABEL, v.name)
        for v in VARIANTS
    ]
    with running_prometheus(files, base / "prom") as server:
        yield _build(generated, "prometheus", base / "data", server.url)


# the Prometheus path is slow (a backfill of every variant and a server): the default suite
# runs every dialect through `ingest openmetrics`, which reads the same rows
PATHS = [
    pytest.param("openmetrics"),
    pytest.param("prometheus", marks=pytest.mark.slow),
]


@pytest.fixture
def site(request: pytest.FixtureRequest) -> Site:
    got: Site = request.getfixturevalue(f"{request.param}_site")
    return got


def _jobs(site: Site, cluster: str) -> pl.DataFrame:
    return Warehouse(site.data_dir).read("job_usage", cluster).sort("job_id")


def _tied(site: Site, cluster: str) -> dict[str, set[tuple[str, int]]]:
    gpus = Warehouse(site.data_dir).read("job_gpus", cluster).filter(pl.col("gpu") >= 0)
    out: dict[str, set[tuple[str, int]]] = {}
    for row in gpus.iter_rows(named=True):
        out.setdefault(row["job_id"], set()).add((row["host"], row["gpu"]))
    return out


def _whole_host(job: dict[str, Any]) -> bool:
    per_host: dict[str, int] = {}
    for a in job["alloc"]:
        per_host[a["host"]] = per_host.get(a["host"], 0) + 1
    return bool(per_host) and all(n == 8 for n in per_host.values())


def expected_tied(truth: dict[str, Any]) -> set[str]:
    """The jobs (with samples) a run must tie: all where the series name the job; else the
    captured ones and the whole-host ones."""
    ran = [j for j in truth["jobs"] if j["n_samples"]]
    captured = truth["telemetry"]["captured_jobs"]
    if captured is None:
        return {j["job_id"] for j in ran}
    seen = set(captured)
    return {j["job_id"] for j in ran if _whole_host(j) or j["job_id"] in seen}


def misplaced(truth: dict[str, Any]) -> set[str]:
    """Jobs tied by an IDX read as the NVML index that holds part of a host whose minor numbers
    differ: tied to the wrong GPUs."""
    return {
        j["job_id"]
        for j in truth["jobs"]
        if j["n_samples"] and not _whole_host(j) and any(a["minor"] != a["gpu"] for a in j["alloc"])
    }


def _same_figures(got: pl.DataFrame, ref: pl.DataFrame, jobs: set[str], what: str) -> None:
    a = got.filter(pl.col("job_id").is_in(sorted(jobs))).select("job_id", *FIGURES)
    b = ref.filter(pl.col("job_id").is_in(sorted(jobs))).select("job_id", *FIGURES)
    assert a.height == b.height == len(jobs), what
    for ra, rb in zip(a.iter_rows(named=True), b.iter_rows(named=True), strict=True):
        for col in FIGURES:
            x, y = ra[col], rb[col]
            if isinstance(y, float) and x is not None:
                assert x == pytest.approx(y, rel=TOL, abs=TOL), (what, ra["job_id"], col, x, y)
            else:
                assert x == y, (what, ra["job_id"], col, x, y)


VARIANT_PARAMS = [v.name for v in VARIANTS]


@pytest.mark.parametrize("site", PATHS, indirect=True)
@pytest.mark.parametrize("variant", VARIANT_PARAMS)
def test_every_dialect_gives_the_reference_figures(site: Site, variant: str) -> None:
    truth = site.truth[variant]
    ref = _jobs(site, "dcgm")
    got = _jobs(site, variant)
    path = site.path
    tied = expected_tied(truth)
    wrong = misplaced(truth) & tied if variant == "nvidia-smi" else set()
    tied -= wrong
    if truth["telemetry"]["captured_jobs"] is not None and variant != "nvidia-smi":
        # jobs on a host whose minor numbers are not its indices, tied by IDX: read as the
        # index, they would be tied to other GPUs and fail below
        assert misplaced(truth) & tied
    _same_figures(got, ref, tied, f"{variant}.{path}")
    # exactly those tied to GPUs, each to its own GPUs (by the host's index, but where the
    # dialect names only the job's own index)
    ties = _tied(site, variant)
    with_gpu_time = set(got.filter(pl.col("gpu_s") > 0)["job_id"]) - wrong
    assert with_gpu_time == tied, sorted(with_gpu_time ^ tied)[:10]
    jobs = {j["job_id"]: j for j in truth["jobs"]}
    for job_id in tied:
        alloc = jobs[job_id]["alloc"]
        if variant == "slurm-job-exporter":
            # no Slurm record names the GPUs: each job's own indices 0..n-1 on a device of its
            # own per host (job_local_gpus), one slot per (job, host)
            per_host: dict[str, int] = {}
            for a in alloc:
                per_host[a["host"]] = per_host.get(a["host"], 0) + 1
            want = {(h, i) for h, n in per_host.items() for i in range(n)}
            held = ties.get(job_id, set())
            assert all(g >= JOB_LOCAL_BASE for _, g in held), (path, job_id, held)
            assert len({(h, (g - JOB_LOCAL_BASE) // SLOT_GPUS) for h, g in held}) == len(per_host)
            assert {(h, (g - JOB_LOCAL_BASE) % SLOT_GPUS) for h, g in held} == want, (path, job_id)
            continue
        want = {(a["host"], a["gpu"]) for a in alloc}
        assert ties.get(job_id) == want, (variant, path, job_id)


@pytest.mark.parametrize("site", PATHS, indirect=True)
@pytest.mark.parametrize("variant", ["dcgm-no-job-labels", "nvidia-smi"])
def test_captures_leave_out_little_gpu_time(site: Site, variant: str) -> None:
    """The GPU time of the jobs no capture saw (and that hold no whole host): measured on the
    generated cluster, at most MISS_MAX."""
    truth = site.truth[variant]
    path = site.path
    ref = _jobs(site, "dcgm")
    ran = {j["job_id"] for j in truth["jobs"] if j["n_samples"]}
    missed = ran - expected_tied(truth)
    total = ref["gpu_s"].sum()
    share = ref.filter(pl.col("job_id").is_in(sorted(missed)))["gpu_s"].sum() / total
    print(f"{variant}.{path}: {len(missed)} of {len(ran)} jobs missed, {share:.2%} of GPU time")
    assert missed and share <= MISS_MAX
