"""The five files of the Philly trace (msr-fiddle/philly-traces), in its format and with its quirks.

- One Philly job is one retry chain of Slurm jobs: its attempts are the chain's jobs, in order,
  each with its own hosts and GPUs. Status: Pass (COMPLETED), Killed (CANCELLED), Failed (other).
  Chains with a job still running at the window end are left out of `cluster_job_log`.
  A job cancelled before it started has no attempts.
- Times in `cluster_job_log` are US Pacific local time with no zone; utilization rows carry
  ` PDT`/` PST`, so the hour repeated at the fall-back shows up twice.
- Planted quirks (listed in truth.json under `philly_quirks`): an attempt in the middle of a job
  with end_time "None" and a first attempt with start_time "None" (the real times are in the
  truth's job entries); non-contiguous GPU lists (from placement); a few `cluster_gpu_util` rows
  with 18 fields (`row[0:2] + row[2:][::2]` recovers them: every value is followed by an empty
  field); `NA` values where a GPU's exporter had no sample in the minute and in a few CPU and
  memory rows; a memory row with mem_total 0; machines listed in `cluster_machine_list` with
  the wrong number of GPUs (2 instead of 8).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gpuwaste.generate import params
from gpuwaste.generate.model import Cluster, Job, Window
from gpuwaste.generate.openmetrics import mem_available_bytes
from gpuwaste.generate.timefmt import pacific

STATUS = {"passed": "Pass", "killed": "Killed", "unsuccessful": "Failed"}


def short_hash(text: str) -> str:
    """The 6-hex-character hash Philly uses for VC and user names."""
    return hashlib.sha256(text.encode()).hexdigest()[:6]


@dataclass
class PhillyJob:
    jobid: str
    status: str
    vc: str
    user: str
    submitted_time: str
    jobs: list[Job]  # the chain's Slurm jobs (attempts), in order
    attempts: list[dict[str, object]] = field(default_factory=list)


@dataclass
class PhillyView:
    jobs: list[PhillyJob]
    by_job: dict[int, tuple[str, int]]  # Job.index -> (Philly jobid, attempt index)
    quirks: dict[str, list[object]]


def _contiguous(gpus: list[int]) -> bool:
    return gpus == list(range(gpus[0], gpus[0] + len(gpus))) if gpus else True


def philly_view(cluster: Cluster) -> PhillyView:
    spec = cluster.spec
    t0 = spec.t0
    chains: dict[int, list[Job]] = {}
    for job in cluster.jobs:
        chains.setdefault(job.chain, []).append(job)
    stamp = (t0 - 5 * 86400) * 1000 + spec.seed % 1000
    out: list[PhillyJob] = []
    by_job: dict[int, tuple[str, int]] = {}
    quirks: dict[str, list[object]] = {"none_end": [], "none_start": [], "non_contiguous": []}
    ordered = sorted(chains.values(), key=lambda js: js[0].index)
    for jobs in ordered:
        jobs.sort(key=lambda j: j.chain_pos)
        if any(j.end is None for j in jobs):
            continue
        jobid = f"application_{stamp}_{len(out) + 1}"
        pj = PhillyJob(
            jobid=jobid,
            status=STATUS[jobs[-1].state],
            vc=short_hash(jobs[0].vc),
            user=short_hash(jobs[0].user),
            submitted_time=pacific(t0 + jobs[0].submit),
            jobs=[j for j in jobs if j.ran],
        )
        for a, job in enumerate(pj.jobs):
            by_job[job.index] = (jobid, a)
            detail: list[dict[str, object]] = []
            for h in sorted({h for h, _ in job.alloc}):
                gpus = [g for hh, g in job.alloc if hh == h]
                detail.append(
                    {"ip": cluster.hosts[h].philly_machine, "gpus": [f"gpu{g}" for g in gpus]}
                )
                if not _contiguous(gpus) and jobid not in quirks["non_contiguous"]:
                    quirks["non_contiguous"].append(jobid)
            assert job.end is not None
            pj.attempts.append(
                {
                    "start_time": pacific(t0 + job.start),
                    "end_time": pacific(t0 + job.end),
                    "detail": detail,
                }
            )
        for job in jobs:
            if not job.ran:
                by_job[job.index] = (jobid, -1)
        out.append(pj)
    _plant_none(out, quirks)
    return PhillyView(out, by_job, quirks)


def _plant_none(jobs: list[PhillyJob], quirks: dict[str, list[object]]) -> None:
    """A middle attempt with end_time "None" and a first attempt with start_time "None"."""
    multi = [pj for pj in jobs if len(pj.attempts) >= 3]
    two = [pj for pj in jobs if len(pj.attempts) == 2]
    if multi:
        pj = multi[0]
        pj.attempts[1]["end_time"] = "None"
        quirks["none_end"].append({"jobid": pj.jobid, "attempt": 1})
    rest = [pj for pj in two + multi[1:]]
    if rest:
        pj = rest[0]
        pj.attempts[0]["start_time"] = "None"
        quirks["none_start"].append({"jobid": pj.jobid, "attempt": 0})


def job_log_text(view: PhillyView) -> str:
    rows = [
        json.dumps(
            {
                "status": pj.status,
                "vc": pj.vc,
                "jobid": pj.jobid,
                "attempts": pj.attempts,
                "submitted_time": pj.submitted_time,
                "user": pj.user,
            }
        )
        for pj in view.jobs
    ]
    return "[\n" + ",\n".join(rows) + "\n]\n"


def _fmt(x: float, digits: int) -> str:
    return repr(round(float(x), digits))


@dataclass
class Minutes:
    """Per-minute means of a window: minute m covers [start_m, start_m + 60)."""

    starts: list[int]  # epoch seconds of each minute
    labels: list[str]  # `YYYY-MM-DD HH:MM:SS PDT`
    index: np.ndarray  # minute of each sample


def minutes(cluster: Cluster, n: int) -> Minutes:
    spec = cluster.spec
    ts = spec.t0 + np.arange(n, dtype=np.int64) * spec.interval_s
    m0 = (spec.t0 // 60) * 60
    idx = (ts - m0) // 60
    count = int(idx[-1]) + 1 if n else 0
    starts = [m0 + 60 * i for i in range(count)]
    return Minutes(starts, [pacific(s, with_zone=True) for s in starts], idx)


def write_util_files(
    cluster: Cluster, out: Path, win: Window, host_cpu: np.ndarray, host_mem: np.ndarray
) -> dict[str, list[object]]:
    """cluster_gpu_util, cluster_cpu_util, cluster_mem_util; returns the planted row quirks."""
    spec = cluster.spec
    n = win.k1 - win.k0
    mins = minutes(cluster, n)
    m_n = len(mins.starts)
    g_n = spec.n_gpus
    rng = np.random.default_rng([spec.seed, 8])
    # per GPU per minute: mean of present samples
    sums = np.zeros((g_n, m_n))
    cnts = np.zeros((g_n, m_n))
    for g in range(g_n):
        pres = win.present[g]
        sums[g] = np.bincount(mins.index, weights=win.util[g] * pres, minlength=m_n)
        cnts[g] = np.bincount(mins.index, weights=pres.astype(np.float64), minlength=m_n)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = sums / cnts
    all_cnt = np.bincount(mins.index, minlength=m_n).astype(np.float64)
    cpu_min = (
        np.stack(
            [
                np.bincount(mins.index, weights=host_cpu[h], minlength=m_n)
                for h in range(spec.n_hosts)
            ]
        )
        / all_cnt
    )
    avail_kb = np.stack([mem_available_bytes(host_mem[h]) / 1024.0 for h in range(spec.n_hosts)])
    free_min = (
        np.stack(
            [
                np.bincount(mins.index, weights=avail_kb[h], minlength=m_n)
                for h in range(spec.n_hosts)
            ]
        )
        / all_cnt
    )
    total_kb = params.HOST_MEM_BYTES / 1024.0

    n_rows = m_n * spec.n_hosts
    n_odd = min(n_rows, 3)
    picks = rng.choice(n_rows, size=min(n_rows, 3 * n_odd + 1), replace=False).tolist()
    eighteen = set(picks[:n_odd])
    cpu_na = set(picks[n_odd : 2 * n_odd])
    mem_na = set(picks[2 * n_odd : 3 * n_odd])
    mem_zero = set(picks[3 * n_odd :])
    quirks: dict[str, list[object]] = {
        "gpu_util_18_field_rows": [],
        "cpu_util_na_rows": [],
        "mem_util_na_rows": [],
        "mem_util_total_zero_rows": [],
    }
    gpu_lines = ["time,machineId," + ",".join(f"gpu{i}_util" for i in range(params.GPUS_PER_HOST))]
    cpu_lines = ["time,machine_id,cpu_util"]
    mem_lines = ["time,machine_id,mem_total,mem_free"]
    g8 = params.GPUS_PER_HOST
    for m in range(m_n):
        label = mins.labels[m]
        for h in range(spec.n_hosts):
            row = m * spec.n_hosts + h
            machine = cluster.hosts[h].philly_machine
            vals = [
                "NA" if cnts[g, m] == 0 else _fmt(means[g, m], 9)
                for g in range(h * g8, (h + 1) * g8)
            ]
            where = {"time": label, "machine": machine}
            if row in eighteen:
                gpu_lines.append(f"{label},{machine}," + ",,".join(vals) + ",")
                quirks["gpu_util_18_field_rows"].append(where)
            else:
                gpu_lines.append(f"{label},{machine}," + ",".join(vals) + ",")
            if row in cpu_na:
                cpu_lines.append(f"{label},{machine},NA")
                quirks["cpu_util_na_rows"].append(where)
            else:
                cpu_lines.append(f"{label},{machine},{_fmt(cpu_min[h, m], 3)}")
            if row in mem_na:
                mem_lines.append(f"{label},{machine},{_fmt(total_kb, 4)},NA")
                quirks["mem_util_na_rows"].append(where)
            elif row in mem_zero:
                mem_lines.append(f"{label},{machine},0.0,0.0")
                quirks["mem_util_total_zero_rows"].append(where)
            else:
                mem_lines.append(f"{label},{machine},{_fmt(total_kb, 4)},{_fmt(free_min[h, m], 4)}")
    (out / "cluster_gpu_util").write_text("\n".join(gpu_lines) + "\n")
    (out / "cluster_cpu_util").write_text("\n".join(cpu_lines) + "\n")
    (out / "cluster_mem_util").write_text("\n".join(mem_lines) + "\n")
    return quirks


def machine_list_text(cluster: Cluster) -> tuple[str, dict[str, int]]:
    """`machineId, number of GPUs, single GPU mem`, sorted by name as strings like the real
    file; about a quarter of the machines (at least one) are listed with 2 GPUs."""
    rng = np.random.default_rng([cluster.spec.seed, 9])
    n = len(cluster.hosts)
    wrong_n = max(1, n // 4)
    wrong = {
        cluster.hosts[int(i)].philly_machine for i in rng.choice(n, size=wrong_n, replace=False)
    }
    mem_gb = round(cluster.spec.gpu_mem_mib / 1024)
    lines = ["machineId, number of GPUs, single GPU mem"]
    listed: dict[str, int] = {}
    for name in sorted(h.philly_machine for h in cluster.hosts):
        count = 2 if name in wrong else params.GPUS_PER_HOST
        if name in wrong:
            listed[name] = count
        lines.append(f"{name},{count}, {mem_gb}GB")
    return "\n".join(lines) + "\n", listed
