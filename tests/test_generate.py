"""The cluster generator: planted truth agrees with the series, formats are what they claim."""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import re
from collections import Counter
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest

from gpuwaste.generate import (
    Cluster,
    GeneratorSpec,
    generate_command,
    job_gpus_frame,
    jobs_frame,
    simulate,
    write_all,
    write_samples_parquet,
)
from gpuwaste.generate.model import Window
from gpuwaste.generate.parquet import day_bounds
from gpuwaste.generate.series import gpu_window
from gpuwaste.generate.timefmt import compress_hostlist, slurm_duration

SPEC = GeneratorSpec()  # 32 GPUs, 1 day at 15 s, across the 2026-11-01 US fall-back


def ep(s: str) -> int:
    return int(datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp())


@pytest.fixture(scope="module")
def cluster() -> Cluster:
    return simulate(SPEC)


@pytest.fixture(scope="module")
def window(cluster: Cluster) -> Window:
    return gpu_window(cluster)


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("gen")
    write_all(SPEC, d)
    return d


@pytest.fixture(scope="module")
def truth(out: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((out / "truth.json").read_text())
    return data


# --- spec ---------------------------------------------------------------------------------------


def test_spec_rounds_gpus_to_hosts_and_validates() -> None:
    spec = GeneratorSpec(gpus=20)
    assert (spec.n_hosts, spec.n_gpus) == (3, 24)
    assert SPEC.n_samples == 5760 and SPEC.duration_s == 86400
    with pytest.raises(ValueError):
        GeneratorSpec(start=datetime(2026, 1, 1))  # naive
    with pytest.raises(ValueError):
        GeneratorSpec(days=0)


def test_same_spec_same_bytes(tmp_path: Path) -> None:
    spec = GeneratorSpec(seed=7, gpus=8, days=0.5)

    def digest(d: Path) -> dict[str, str]:
        return {
            str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(d.rglob("*"))
            if p.is_file()
        }

    write_all(spec, tmp_path / "a", gzip=True)
    write_all(spec, tmp_path / "b", gzip=True)
    assert digest(tmp_path / "a") == digest(tmp_path / "b")
    assert "metrics.om.gz" in digest(tmp_path / "a")
    write_all(GeneratorSpec(seed=8, gpus=8, days=0.5), tmp_path / "c", gzip=True)
    assert digest(tmp_path / "c")["truth.json"] != digest(tmp_path / "a")["truth.json"]


# --- series versus truth ------------------------------------------------------------------------


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """[a, b) runs of True."""
    m = np.concatenate(([False], mask, [False])).astype(np.int8)
    d = np.diff(m)
    return list(zip(np.nonzero(d == 1)[0].tolist(), np.nonzero(d == -1)[0].tolist(), strict=True))


def test_idle_slots_short_runs_and_never_used_are_exactly_the_planted_ones(
    cluster: Cluster, window: Window, truth: dict[str, Any]
) -> None:
    """Re-detect from the series with the documented conventions; compare with truth.json."""
    spec = cluster.spec
    t0, dt = spec.t0, spec.interval_s
    idle: set[tuple[str, str, int, int, int]] = set()
    short: set[tuple[str, str, int, int, int]] = set()
    never: set[tuple[str, str, int]] = set()
    for job in cluster.jobs:
        if job.plan is None or job.plan.n == 0:
            continue
        i0, n = job.plan.i0, job.plan.n
        end = t0 + (spec.duration_s if job.end is None else job.end)
        assert t0 + i0 * dt >= t0 + job.start > t0 + (i0 - 1) * dt
        for h, g in job.alloc:
            row = h * 8 + g
            assert (window.job[row, i0 : i0 + n] == job.index).all()
            u = window.util[row, i0 : i0 + n]
            m = window.mem[row, i0 : i0 + n]
            assert not ((u > 0) & (m == 0)).any(), "busy GPU with no memory"
            zero = (u == 0) & (m == 0)
            key = (job.job_id, cluster.hosts[h].name, g)
            if zero.all():
                never.add(key)
                continue
            for a, b in _runs(zero):
                s, e = t0 + (i0 + a) * dt, (t0 + (i0 + b) * dt if b < n else end)
                (idle if e - s > 60 else short).add((*key, s, e))

    def as_set(rows: list[dict[str, Any]]) -> set[tuple[str, str, int, int, int]]:
        return {(r["job_id"], r["host"], r["gpu"], ep(r["start"]), ep(r["end"])) for r in rows}

    assert as_set(truth["idle_slots"]) == idle
    assert as_set(truth["short_zero_runs"]) == short
    assert {(r["job_id"], r["host"], r["gpu"]) for r in truth["never_used"]} == never
    # planted on the right side of 60 s with a margin of one interval
    assert min(ep(r["end"]) - ep(r["start"]) for r in truth["idle_slots"]) >= 75
    assert max(ep(r["end"]) - ep(r["start"]) for r in truth["short_zero_runs"]) <= 45
    assert len(idle) > 20 and len(short) > 10 and len(never) > 5


def test_phases_hold_their_level_and_jump_more_than_a_gib(
    cluster: Cluster, window: Window, truth: dict[str, Any]
) -> None:
    spec = cluster.spec
    rows = {h.name: h.index * 8 for h in cluster.hosts}
    by_gpu: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for p in truth["phases"]:
        k0 = (ep(p["start"]) - spec.t0 + spec.interval_s - 1) // spec.interval_s
        k1 = (ep(p["end"]) - spec.t0 + spec.interval_s - 1) // spec.interval_s
        mem = window.mem[rows[p["host"]] + p["gpu"], k0:k1]
        assert len(mem) > 0
        assert np.abs(mem - p["mem_mib"]).max() <= 6  # "+- a few MiB", far under 512
        by_gpu.setdefault((p["job_id"], p["host"], p["gpu"]), []).append(p)
    jumps = 0
    for phases in by_gpu.values():
        levels = [p["mem_mib"] for p in phases if p["mem_mib"] > 0]
        for a, b in pairwise(phases):
            assert a["end"] == b["start"]  # phases tile the allocation
            assert a["mem_mib"] != b["mem_mib"]
        for a, b in pairwise(levels):
            if a != b:
                assert abs(a - b) > 1024
                jumps += 1
    assert jumps > 20
    multi = [v for v in by_gpu.values() if len({p["mem_mib"] for p in v if p["mem_mib"]}) > 1]
    assert len(multi) > 10


def test_unallocated_gpus_are_zero_and_gaps_have_no_samples(
    cluster: Cluster, window: Window, truth: dict[str, Any]
) -> None:
    free = window.job < 0
    assert free.any() and (window.util[free] == 0).all() and (window.mem[free] == 0).all()
    spec = cluster.spec
    absent = 0
    assert len(truth["gaps"]) >= 2
    for gap in truth["gaps"]:
        row = next(h.index for h in cluster.hosts if h.name == gap["host"]) * 8 + gap["gpu"]
        k0 = (ep(gap["start"]) - spec.t0) // spec.interval_s
        k1 = (ep(gap["end"]) - spec.t0) // spec.interval_s
        assert ep(gap["end"]) - ep(gap["start"]) == 600
        assert not window.present[row, k0:k1].any()
        assert window.present[row, k0 - 1] and window.present[row, k1]
        absent += k1 - k0
    assert int((~window.present).sum()) == absent


def test_windows_cut_anywhere_give_the_same_samples(cluster: Cluster, window: Window) -> None:
    parts = [gpu_window(cluster, a, b) for a, b in [(0, 1000), (1000, 1001), (1001, 5760)]]
    for name in ("util", "mem", "job", "present", "cpu"):
        joined = np.concatenate([getattr(p, name) for p in parts], axis=1)
        assert np.array_equal(joined, getattr(window, name)), name


def test_planted_job_shapes(cluster: Cluster, truth: dict[str, Any]) -> None:
    jobs = {j["job_id"]: j for j in truth["jobs"]}
    tags = Counter(t for j in truth["jobs"] for t in j["planted"])
    for t in ("slow_start_long", "unreleased_long", "mid_idle", "short_zero", "stall",
              "fluctuating", "oversubscription", "non_dl", "debug", "checkpointing"):  # fmt: skip
        assert tags[t] > 0, t
    slots = truth["idle_slots"]
    first = {(s["job_id"], s["host"], s["gpu"]): s for s in slots}
    long_start = [
        s for s in slots
        if "slow_start_long" in jobs[s["job_id"]]["planted"]
        and s["start"] == jobs[s["job_id"]]["first_sample"]
        and ep(s["end"]) - ep(s["start"]) >= 600
    ]  # fmt: skip
    long_end = [
        s for s in slots
        if jobs[s["job_id"]]["end"] == s["end"] and ep(s["end"]) - ep(s["start"]) >= 600
    ]  # fmt: skip
    assert long_start and long_end and first
    # debugging jobs: mostly idle, several hit the 8 h limit exactly
    assert len(truth["timeouts"]) >= 2
    for jid in truth["timeouts"]:
        j = jobs[jid]
        assert j["is_debug"] and j["partition"] == "debug" and j["raw_state"] == "TIMEOUT"
        assert ep(j["end"]) - ep(j["start"]) == 8 * 3600
    idle_by_job: Counter[str] = Counter()
    for s in slots:
        idle_by_job[s["job_id"]] += ep(s["end"]) - ep(s["start"])
    long_debug = [j for j in truth["timeouts"]]
    shares = [idle_by_job[j] / (8 * 3600 * len(jobs[j]["alloc"])) for j in long_debug]
    assert np.median(shares) > 0.5
    assert all(
        j["name"] in ("interactive", "bash", "jupyter") for j in jobs.values() if j["is_debug"]
    )


def test_users_mostly_stay_in_their_vc(truth: dict[str, Any]) -> None:
    home = {u: v["home_vc"] for u, v in truth["users"].items()}
    jobs = truth["jobs"]
    assert 10 <= len(home) <= 30 and 4 <= len({j["vc"] for j in jobs}) <= 6
    assert sum(j["vc"] == home[j["user"]] for j in jobs) / len(jobs) > 0.8


# --- frames -------------------------------------------------------------------------------------


def test_frames_have_the_warehouse_columns(cluster: Cluster) -> None:
    jf = jobs_frame(cluster)
    ts = pl.Datetime("us", "UTC")
    assert jf.schema == pl.Schema(
        {  # type: ignore[arg-type]
            "cluster": pl.String, "job_id": pl.String, "user": pl.String, "vc": pl.String,
            "name": pl.String, "state": pl.String, "raw_state": pl.String, "submit_ts": ts,
            "start_ts": ts, "end_ts": ts, "gpus": pl.Int32, "is_debug": pl.Boolean,
            "source": pl.String,
        }
    )  # fmt: skip
    assert set(jf["state"]) == {"passed", "killed", "unsuccessful", "running"}
    assert (
        jf.filter(pl.col("state") == "running")["end_ts"].null_count()
        == (jf["state"] == "running").sum()
    )
    assert jf["job_id"].is_unique().all()
    gf = job_gpus_frame(cluster)
    assert gf.columns == ["cluster", "job_id", "attempt", "host", "gpu", "start_ts", "end_ts"]
    assert gf.schema["attempt"] == pl.Int16 and gf.schema["gpu"] == pl.Int16
    assert gf.height == sum(len(j.alloc) for j in cluster.jobs)


# --- OpenMetrics --------------------------------------------------------------------------------


def test_openmetrics_layout(
    out: Path, cluster: Cluster, window: Window, truth: dict[str, Any]
) -> None:
    """One pass over the file: families contiguous, series time-ordered, labels as dcgm-exporter's
    HPC mode, used + free = capacity, counters that give the host CPU utilization."""
    text = (out / "metrics.om").read_text()
    assert text.endswith("\n# EOF\n")
    t0 = cluster.spec.t0
    family = ""
    families: list[str] = []
    span: dict[str, list[int]] = {}  # series -> [first ts, last ts]
    counts: Counter[str] = Counter()
    labels_of: dict[str, dict[str, str]] = {}
    used: dict[tuple[str, str], int] = {}
    cpu: dict[str, dict[str, float]] = {}
    counter_of: dict[str, int] = {}
    drops: set[tuple[str, str]] = set()
    for line in text.splitlines()[:-1]:
        if line.startswith("#"):
            kind, _, name = line.split(" ", 3)[:3]
            if kind == "#" and _ == "TYPE":
                assert name not in families  # each family's block is contiguous
                families.append(family := name)
            continue
        head, value, stamp = line.rsplit(" ", 2)
        ts = int(stamp)
        name = head.split("{", 1)[0]
        assert name in (family, family + "_total")
        first_last = span.setdefault(head, [ts, ts - 1])
        assert ts > first_last[1]  # strictly increasing per series
        first_last[1] = ts
        counts[name] += 1
        if head not in labels_of:
            labels_of[head] = dict(re.findall(r'(\w+)="([^"]*)"', head))
        lab = labels_of[head]
        if name == "DCGM_FI_DEV_GPU_UTIL" and "hpc_job" not in lab:
            assert value == "0"
        elif name == "DCGM_FI_DEV_FB_USED":
            used[(head.split("{", 1)[1], stamp)] = int(value)
        elif name == "DCGM_FI_DEV_FB_FREE":
            assert used.pop((head.split("{", 1)[1], stamp)) + int(value) == 81920
        elif name == "DCGM_FI_DEV_POWER_USAGE":
            assert 60 <= int(value) <= 400  # generate/power.py: idle .. power limit
        elif name == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION":
            last = counter_of.get(head)
            if last is not None and int(value) < last:
                drops.add((lab["Hostname"], lab["gpu"]))
            counter_of[head] = int(value)
        elif (
            name == "node_cpu_seconds_total"
            and lab["cpu"] == "0"
            and lab["instance"] == "gpu-node-002:9100"
        ):
            cpu.setdefault(stamp, {})[lab["mode"]] = float(value)
    assert not used
    # the energy counter (mJ) runs backwards on one GPU: the planted reset (generate/power.py)
    assert drops == {(cluster.hosts[0].name, "0")}
    assert families == [
        "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "node_cpu_seconds", "node_memory_MemTotal_bytes", "node_memory_MemAvailable_bytes",
    ]  # fmt: skip
    n, g = cluster.spec.n_samples, cluster.spec.n_gpus
    absent = int((~window.present).sum())
    assert counts["DCGM_FI_DEV_GPU_UTIL"] == counts["DCGM_FI_DEV_FB_FREE"] == n * g - absent
    assert counts["node_cpu_seconds_total"] == n * cluster.spec.n_hosts * 2 * 4
    assert counts == Counter(truth["openmetrics_samples"])
    jobs_by_id = {j.job_id: j for j in cluster.jobs}
    hpc_series = set()
    for head, lab in labels_of.items():
        if head.startswith("DCGM"):
            host = next(h for h in cluster.hosts if h.name == lab["Hostname"])
            assert lab["device"] == f"nvidia{host.minors[int(lab['gpu'])]}"
            assert lab["UUID"].startswith("GPU-")
            assert lab["modelName"] == "NVIDIA A100-SXM4-80GB"
            if "hpc_job" in lab:
                job = jobs_by_id[lab["hpc_job"]]
                first, last = span[head]
                assert job.start <= first - t0 and (job.end is None or last - t0 < job.end)
                hpc_series.add((lab["hpc_job"], lab["Hostname"], lab["gpu"]))
    expected = {
        (j.job_id, cluster.hosts[h].name, str(i))
        for j in cluster.jobs if j.plan and j.plan.n for h, i in j.alloc
    }  # fmt: skip
    assert hpc_series == expected
    stamps = sorted(cpu, key=int)
    a, b = cpu[stamps[100]], cpu[stamps[101]]
    d_total = sum(b.values()) - sum(a.values())
    assert d_total == pytest.approx(15.0, abs=0.05)
    assert 0.0 <= 1 - (b["idle"] - a["idle"]) / d_total <= 1.0


# --- sacct --------------------------------------------------------------------------------------


def test_sacct_parsable2(out: Path, cluster: Cluster) -> None:
    lines = (out / "sacct.txt").read_text().splitlines()
    header = lines[0].split("|")
    assert header == [
        "JobID", "JobIDRaw", "JobName", "User", "Account", "Partition", "QOS", "State",
        "ExitCode", "Submit", "Start", "End", "Elapsed", "Timelimit", "AllocTRES", "NodeList",
    ]  # fmt: skip
    rows = [dict(zip(header, ln.split("|"), strict=True)) for ln in lines[1:]]
    jobs = [r for r in rows if "." not in r["JobID"]]
    steps = [r for r in rows if "." in r["JobID"]]
    assert len(jobs) == len(cluster.jobs)
    assert {s["JobID"].split(".")[1] for s in steps} == {"batch", "extern", "0"}
    assert all(s["User"] == "" and s["Partition"] == "" for s in steps)
    states = Counter(r["State"].split(" by ")[0] for r in jobs)
    assert set(states) == {
        "COMPLETED",
        "CANCELLED",
        "FAILED",
        "TIMEOUT",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "RUNNING",
    }
    assert any(re.fullmatch(r"CANCELLED by \d+", r["State"]) for r in jobs)
    stamp = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")
    for r in jobs:
        assert stamp.fullmatch(r["Submit"]) and stamp.fullmatch(r["Start"])
        assert stamp.fullmatch(r["End"]) or (r["End"] == "Unknown" and r["State"] == "RUNNING")
        assert re.fullmatch(r"(\d+-)?\d\d:\d\d:\d\d", r["Elapsed"])
        assert r["Account"] in cluster.vcs and r["Partition"] in ("gpu", "debug")
    arrays = [r for r in jobs if "_" in r["JobID"]]
    assert arrays and any(r["JobID"].split("_")[0] != r["JobIDRaw"] for r in arrays)
    tres = [r["AllocTRES"] for r in jobs if r["AllocTRES"]]
    assert any("gres/gpu:a100=" in t for t in tres) and any("gres/gpu=" in t for t in tres)
    assert any(re.fullmatch(r"gpu-node-\[\d{3}[-,]\d{3}.*\]", r["NodeList"]) for r in jobs)
    assert any(r["NodeList"] == "None assigned" and r["Start"] == r["End"] for r in jobs)
    by_id = {j.job_id: j for j in cluster.jobs}
    for r in jobs:
        j = by_id[r["JobIDRaw"]]
        if j.end is not None:
            assert r["Elapsed"] == slurm_duration(j.end - j.start)


def test_sacct_times_follow_the_timezone() -> None:
    from gpuwaste.generate.sacct import sacct_text

    c = simulate(GeneratorSpec(gpus=8, days=1.0, timezone="America/New_York"))
    first = c.jobs[0]
    row = sacct_text(c).splitlines()[1].split("|")
    local = datetime.fromtimestamp(c.spec.t0 + first.submit, UTC).astimezone(
        __import__("zoneinfo").ZoneInfo("America/New_York")
    )
    assert row[9] == local.strftime("%Y-%m-%dT%H:%M:%S")


def test_compress_hostlist() -> None:
    assert compress_hostlist(["gpu-node-003"]) == "gpu-node-003"
    names = ["gpu-node-004", "gpu-node-001", "gpu-node-002", "gpu-node-007"]
    assert compress_hostlist(names) == "gpu-node-[001-002,004,007]"
    assert compress_hostlist(["gpu-node-001", "gpu-node-002"]) == "gpu-node-[001-002]"


# --- Philly -------------------------------------------------------------------------------------


def test_philly_job_log(out: Path, truth: dict[str, Any]) -> None:
    log = json.loads((out / "philly" / "cluster_job_log").read_text())
    assert isinstance(log, list) and log
    assert {j["status"] for j in log} == {"Pass", "Killed", "Failed"}
    for j in log:
        assert set(j) == {"status", "vc", "jobid", "submitted_time", "user", "attempts"}
        assert re.fullmatch(r"[0-9a-f]{6}", j["vc"]) and re.fullmatch(r"[0-9a-f]{6}", j["user"])
        assert re.fullmatch(r"application_\d{13}_\d+", j["jobid"])
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", j["submitted_time"])
        for a in j["attempts"]:
            for d in a["detail"]:
                assert d["ip"] in truth["philly_machine_map"].values()
                assert all(re.fullmatch(r"gpu[0-7]", g) for g in d["gpus"])
    assert any(not j["attempts"] for j in log)
    assert any(len(j["attempts"]) >= 3 and j["attempts"][1]["end_time"] == "None" for j in log)
    assert any(a["start_time"] == "None" for j in log for a in j["attempts"])
    assert any(len(j["attempts"]) > 1 and j["status"] == "Failed" for j in log)
    moved = [
        j for j in log
        if j["attempts"]
        and len({d["ip"] for a in j["attempts"] for d in a["detail"]}) > len(j["attempts"][0]["detail"])
    ]  # fmt: skip
    assert moved, "no retried job ran on other hosts"

    def contiguous(gs: list[str]) -> bool:
        k = [int(g[3:]) for g in gs]
        return k == list(range(k[0], k[0] + len(k)))

    assert any(not contiguous(d["gpus"]) for j in log for a in j["attempts"] for d in a["detail"])
    assert {truth["philly_vc_map"][j["vc"]] for j in truth["jobs"]} >= {j["vc"] for j in log}
    # truth attempts mirror the file, with null for "None"
    truth_jobs = {j["philly_jobid"]: j for j in truth["jobs"] if j["philly_jobid"]}
    for j in log:
        if j["attempts"]:
            tj = truth_jobs[j["jobid"]]
            assert [a["start"] is None for a in tj["attempts"]] == [
                a["start_time"] == "None" for a in j["attempts"]
            ]


def test_philly_utilization_files(
    out: Path, cluster: Cluster, window: Window, truth: dict[str, Any]
) -> None:
    p = out / "philly"
    gpu_lines = (p / "cluster_gpu_util").read_text().splitlines()
    assert gpu_lines[0] == "time,machineId," + ",".join(f"gpu{i}_util" for i in range(8))
    rows = list(csv.reader(io.StringIO("\n".join(gpu_lines[1:]))))
    assert Counter(len(r) for r in rows).keys() == {11, 18}
    eighteen = [r for r in rows if len(r) == 18]
    assert len(eighteen) == len(truth["philly_quirks"]["gpu_util_18_field_rows"]) > 0
    assert all(r[-1] == "" for r in rows if len(r) == 11)  # the trailing comma
    fixed = [r[:10] if len(r) == 11 else r[0:2] + r[2:][::2] for r in rows]
    zones = Counter(r[0][-3:] for r in fixed)
    assert set(zones) == {"PDT", "PST"}
    # the repeated hour 01:00-01:59 appears once as PDT and once as PST
    assert any(r[0] == "2026-11-01 01:30:00 PDT" for r in fixed)
    assert any(r[0] == "2026-11-01 01:30:00 PST" for r in fixed)
    assert any("NA" in r for r in fixed)  # minutes inside data gaps
    # values are the mean of the minute's 15 s samples
    m2h = {v: k for k, v in truth["philly_machine_map"].items()}
    row = fixed[500]
    host = next(h for h in cluster.hosts if h.name == m2h[row[1]])
    minute = 500 // cluster.spec.n_hosts
    for i in range(8):
        vals = window.util[host.index * 8 + i, 4 * minute : 4 * minute + 4]
        pres = window.present[host.index * 8 + i, 4 * minute : 4 * minute + 4]
        if pres.any():
            assert float(row[2 + i]) == pytest.approx(vals[pres].mean())
    cpu = (p / "cluster_cpu_util").read_text().splitlines()
    assert cpu[0] == "time,machine_id,cpu_util" and any(ln.endswith(",NA") for ln in cpu)
    mem = (p / "cluster_mem_util").read_text().splitlines()
    assert mem[0] == "time,machine_id,mem_total,mem_free"
    assert any(ln.endswith(",0.0,0.0") for ln in mem) and any(ln.endswith(",NA") for ln in mem)
    ml = (p / "cluster_machine_list").read_text().splitlines()
    assert ml[0] == "machineId, number of GPUs, single GPU mem"
    assert all(re.fullmatch(r"m\d+,[28], 80GB", ln) for ln in ml[1:])
    assert any(",2, " in ln for ln in ml[1:])
    assert [ln.split(",")[0] for ln in ml[1:]] == sorted(ln.split(",")[0] for ln in ml[1:])


# --- parquet and CLI ----------------------------------------------------------------------------


def test_write_samples_parquet_per_day(tmp_path: Path) -> None:
    spec = GeneratorSpec(seed=3, gpus=8, days=0.75)  # 12:00 -> 06:00 next day: two dates
    write_samples_parquet(spec, tmp_path)
    parts = sorted(tmp_path.rglob("*.parquet"))
    assert [p.parent.name for p in parts] == ["date=2026-10-31", "date=2026-11-01"]
    assert [b[0] for b in day_bounds(spec)] == ["2026-10-31", "2026-11-01"]
    tables = [pq.read_table(p) for p in parts]
    assert str(tables[0].schema.field("ts").type) == "timestamp[us, tz=UTC]"
    assert [f.name for f in tables[0].schema] == [
        "host", "gpu", "ts", "util", "mem_used_mib", "mem_total_mib", "power_w", "job_id",
    ]  # fmt: skip
    frames = [pl.DataFrame(pl.from_arrow(t)) for t in tables]
    for f in frames:
        assert f.equals(f.sort("host", "gpu", "ts"))
    df = pl.concat(frames)
    c = simulate(spec)
    w = gpu_window(c)
    assert df.height == int(w.present.sum())
    assert df["job_id"].null_count() == int(((w.job < 0) & w.present).sum())
    assert df.filter(pl.col("job_id").is_null())["util"].max() == 0
    first = tables[0].slice(0, 1).to_pylist()[0]
    assert (
        first["host"] == "gpu-node-001" and first["gpu"] == 0 and first["mem_total_mib"] == 81920.0
    )


def test_generate_command(tmp_path: Path) -> None:
    generate_command(tmp_path, seed=1, gpus=8, days=0.25, interval_s=30,
                     start="2026-03-08T06:00:00Z", cluster="lab", gzip=True)  # fmt: skip
    truth = json.loads((tmp_path / "truth.json").read_text())
    assert truth["spec"]["cluster"] == "lab" and truth["window"]["start"] == "2026-03-08T06:00:00Z"
    assert truth["window"]["n_samples"] == 720
    with gzip.open(tmp_path / "metrics.om.gz", "rt") as fh:
        assert fh.read().endswith("# EOF\n")
