"""MIG hosts with planted truth per slice (`gpuwaste generate --mig-hosts N`).

Each MIG host has two A100-SXM4-80GB GPUs: GPU 0 in MIG mode, GPU 1 whole (MIG and whole GPUs
on one host). GPU 0's layout alternates between hosts, so a cluster has mixed profiles:
even hosts `3g.40gb` + `2g.20gb` + `1g.10gb` + `1g.10gb`, odd hosts `4g.40gb` + `3g.40gb`; both use
all 7 compute slices. Every device (instance or whole GPU) runs jobs one after another, on sample
boundaries, with gaps between them. A job is busy at one utilization and memory level, except a
planted idle slot in its middle (utilization 0, memory 0) or, for a never-used job, idle
throughout.

What is written, as the DCGM exporter writes MIG (labels `GPU_I_ID`, `GPU_I_PROFILE` beside the
parent's `gpu`, `UUID` and `modelName`): per instance `DCGM_FI_PROF_GR_ENGINE_ACTIVE` (0-1),
`DCGM_FI_DEV_FB_USED` / `FB_FREE` (of the instance's memory) and `DCGM_FI_DEV_GPU_UTIL` = 0
(what the exporter reports on MIG, dcgm-exporter#216); for the parent GPU 0, the slice-weighted
engine activity without a job label; for GPU 1, the whole-GPU families. A series carries
`hpc_job` while its device is allocated. In sacct, a MIG job's AllocTRES names its profile
(`gres/gpu:1g.10gb=1`, or `gres/gpu:a100_1g.10gb=1` for every other job), a whole-GPU job
`gres/gpu:a100=1`.

Shared GPUs (`gpuwaste generate --shared-gpus N`): N more hosts `shared-node-NN`, each with one
whole A100 time-sliced by two independent job streams, so their jobs overlap. The readings are
the device's (the sharers' utilization summed, capped at 100, and their memory summed), written
once per job holding the GPU (dcgm-exporter's HPC mode) and without job label when none does.

Truth (`truth.json` key `mig`): per job, the device (host, gpu, gpu_instance, mig_profile,
gpu_weight = slice weight x device share, shared), start, end, alloc_s (wall), gpu_s (= alloc_s x
gpu_weight: a shared GPU gives each of the k jobs holding it 1/k of each sample interval),
idle_slot_s (wall), never_used, util_mean (time-weighted over the job, as
docs/definitions.md#time-weighting: the idle slot of n samples lasts n intervals; null on a
shared GPU), energy_kwh (the device's power x interval over the job's samples x the slice
weight; null on a shared GPU). Power (`DCGM_FI_DEV_POWER_USAGE`, generate/power.py) is the
physical GPU's: a MIG-mode GPU's from its instances' slice-weighted utilization and summed
memory, repeated on every instance's series as dcgm-exporter does. The default generator output
does not change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TextIO

import numpy as np

from gpuwaste.generate.model import GeneratorSpec
from gpuwaste.generate.power import KWH, power_w
from gpuwaste.generate.timefmt import iso_z, slurm_duration, slurm_time
from gpuwaste.warehouse.mig import parse_profile

MODEL = "NVIDIA A100-SXM4-80GB"
WHOLE_MEM_MIB = 81920
LAYOUTS = (
    ((1, "3g.40gb"), (5, "2g.20gb"), (13, "1g.10gb"), (14, "1g.10gb")),
    ((2, "4g.40gb"), (3, "3g.40gb")),
)
FIRST_JOB_ID = 800001


@dataclass(frozen=True)
class Device:
    host: str
    host_index: int
    gpu: int
    instance: int | None
    profile: str | None
    shared: bool = False  # time-sliced by two job streams (gpuwaste generate --shared-gpus)

    @property
    def weight(self) -> float:
        p = parse_profile(self.profile) if self.profile else None
        return p.weight if p else 1.0

    @property
    def mem_mib(self) -> int:
        p = parse_profile(self.profile) if self.profile else None
        return int(p.memory_mib) if p else WHOLE_MEM_MIB


@dataclass(frozen=True)
class MigJob:
    job_id: str
    user: str
    device: Device
    k0: int  # first sample (start = t0 + k0 * interval)
    k1: int  # end sample, exclusive (end = t0 + k1 * interval)
    util: int  # percent while busy
    mem_mib: int  # while busy
    idle: tuple[int, int] | None  # samples [a, b) idle inside the job
    never_used: bool


@dataclass(frozen=True)
class MigCluster:
    spec: GeneratorSpec
    devices: tuple[Device, ...]
    jobs: tuple[MigJob, ...]

    def jobs_of(self, d: Device) -> list[MigJob]:
        return [j for j in self.jobs if j.device == d]


def devices(n_hosts: int, n_shared: int = 0) -> tuple[Device, ...]:
    out: list[Device] = []
    width = max(2, len(str(n_hosts)))
    for h in range(n_hosts):
        name = f"mig-node-{h + 1:0{width}d}"
        out += [Device(name, h, 0, gi, prof) for gi, prof in LAYOUTS[h % len(LAYOUTS)]]
        out.append(Device(name, h, 1, None, None))
    for i in range(n_shared):
        out.append(Device(f"shared-node-{i + 1:02d}", n_hosts + i, 0, None, None, shared=True))
    return tuple(out)


def plan(spec: GeneratorSpec, n_hosts: int, n_shared: int = 0) -> MigCluster:
    """Jobs on every device of `n_hosts` MIG hosts and `n_shared` hosts with one GPU shared by
    two job streams (deterministic in spec.seed)."""
    rng = np.random.default_rng([spec.seed, 14, n_hosts])
    n = spec.n_samples
    hour = max(1, 3600 // spec.interval_s)
    jobs: list[MigJob] = []
    streams = [(d, s) for d in devices(n_hosts, n_shared) for s in range(2 if d.shared else 1)]
    for d, _ in streams:
        k = 4 + int(rng.integers(0, hour // 2 + 1))
        while k + 10 < n:  # every job ends inside the window, before its last sample
            length = int(rng.integers(hour // 2, 3 * hour + 1))
            k1 = min(k + max(length, 8), n - 2)
            never = not d.shared and bool(rng.random() < 0.15)
            idle = None
            span = k1 - k
            if not never and not d.shared and span >= 24 and rng.random() < 0.5:
                a = k + span // 3
                idle = (a, a + max(6, span // 6))
            jobs.append(
                MigJob(
                    job_id=str(FIRST_JOB_ID + len(jobs)),
                    user=f"miguser{int(rng.integers(1, 6))}",
                    device=d,
                    k0=k,
                    k1=k1,
                    util=int(rng.integers(15, 96)),
                    mem_mib=int(d.mem_mib * float(rng.uniform(0.1, 0.4 if d.shared else 0.8))),
                    idle=idle,
                    never_used=never,
                )
            )
            k = k1 + 2 + int(rng.integers(0, hour // 2 + 1))
    return MigCluster(spec, devices(n_hosts, n_shared), tuple(jobs))


def _values(c: MigCluster, d: Device) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per sample of device d: utilization %, memory used MiB, job index (-1: unallocated)."""
    n = c.spec.n_samples
    util = np.zeros(n, dtype=np.int64)
    mem = np.zeros(n, dtype=np.int64)
    job = np.full(n, -1, dtype=np.int64)
    for i, j in enumerate(c.jobs):
        if j.device != d:
            continue
        if d.shared:  # the device's reading: every sharer's use together
            util[j.k0 : j.k1] = np.minimum(util[j.k0 : j.k1] + j.util, 100)
            mem[j.k0 : j.k1] += j.mem_mib
            continue
        job[j.k0 : j.k1] = i
        if j.never_used:
            continue
        util[j.k0 : j.k1] = j.util
        mem[j.k0 : j.k1] = j.mem_mib
        if j.idle:
            util[j.idle[0] : j.idle[1]] = 0
            mem[j.idle[0] : j.idle[1]] = 0
    return util, mem, job


def _labels(d: Device) -> str:
    uuid = f"GPU-{d.host_index:08x}-7a7a-4b4b-8c8c-{d.gpu:012x}"
    base = (
        f'gpu="{d.gpu}",UUID="{uuid}",device="nvidia{d.gpu}",modelName="{MODEL}",'
        f'Hostname="{d.host}"'
    )
    if d.instance is None:
        return base
    return f'{base},GPU_I_PROFILE="{d.profile}",GPU_I_ID="{d.instance}"'


def _write_series(
    fh: TextIO, family: str, labels: str, job_ids: list[str], job: np.ndarray, text: list[str],
    stamps: list[str],
) -> int:  # fmt: skip
    """One series per (device, job label) in order of appearance; returns samples written."""
    written = 0
    keys = list(dict.fromkeys(job.tolist()))
    for key in keys:
        extra = f',hpc_job="{job_ids[key]}"' if key >= 0 else ""
        prefix = f"{family}{{{labels}{extra}}} "
        for k in np.nonzero(job == key)[0].tolist():
            fh.write(f"{prefix}{text[k]} {stamps[k]}\n")
            written += 1
    return written


class MigWriter:
    """Writes the MIG hosts' series into the generator's OpenMetrics families."""

    NEW_FAMILIES = (
        ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active.", "gauge"),
    )

    def __init__(self, c: MigCluster) -> None:
        self.c = c
        spec = c.spec
        self.stamps = [str(spec.t0 + k * spec.interval_s) for k in range(spec.n_samples)]
        self.job_ids = [j.job_id for j in c.jobs]
        self.values = {d: _values(c, d) for d in c.devices}

    def power(self, d: Device) -> np.ndarray:
        """Power (W) of device d's physical GPU at each sample: a MIG instance reads its
        parent's, from the slice-weighted utilization and the memory of all its instances."""
        if d.instance is None:
            util, mem, _ = self.values[d]
            return power_w(util, mem)
        parts = [
            p
            for p in self.c.devices
            if (p.host, p.gpu) == (d.host, d.gpu) and p.instance is not None
        ]
        util = np.rint(sum(self.values[p][0] * p.weight for p in parts)).astype(np.int64)
        mem = sum((self.values[p][1] for p in parts), np.zeros_like(util))
        return power_w(util, mem)

    def _text(self, family: str, d: Device) -> list[str] | None:
        util, mem, _ = self.values[d]
        if family == "DCGM_FI_DEV_POWER_USAGE":
            return [str(v) for v in self.power(d).tolist()]
        if family == "DCGM_FI_DEV_GPU_UTIL":
            return ["0"] * len(util) if d.instance is not None else [str(v) for v in util]
        if family == "DCGM_FI_DEV_FB_USED":
            return [str(v) for v in mem]
        if family == "DCGM_FI_DEV_FB_FREE":
            return [str(d.mem_mib - v) for v in mem]
        if family == "DCGM_FI_PROF_GR_ENGINE_ACTIVE":
            return [f"{v / 100:.6f}" for v in util]
        return None

    def family(self, fh: TextIO, family: str) -> int:
        """The MIG hosts' samples of one DCGM family (written inside its block)."""
        written = 0
        for d in self.c.devices:
            text = self._text(family, d)
            if text is not None and d.shared:
                written += self._shared_series(fh, family, d, text)
            elif text is not None:
                job = self.values[d][2]
                written += self._series(fh, family, d, job, text)
        if family == "DCGM_FI_PROF_GR_ENGINE_ACTIVE":
            for parent in dict.fromkeys(
                Device(d.host, d.host_index, d.gpu, None, None)
                for d in self.c.devices
                if d.instance is not None
            ):
                written += self._parent(fh, family, parent)
        return written

    def _series(self, fh: TextIO, family: str, d: Device, job: np.ndarray, text: list[str]) -> int:
        return _write_series(fh, family, _labels(d), self.job_ids, job, text, self.stamps)

    def _shared_series(self, fh: TextIO, family: str, d: Device, text: list[str]) -> int:
        """A shared GPU as dcgm-exporter writes it in HPC mode: the device's readings repeated
        in one series per job holding it, and a series without job label when none does."""
        held_by_a_job = np.zeros(len(text), dtype=bool)
        written = 0
        for j in self.c.jobs:
            if j.device != d:
                continue
            held_by_a_job[j.k0 : j.k1] = True
            prefix = f'{family}{{{_labels(d)},hpc_job="{j.job_id}"}} '
            for k in range(j.k0, j.k1):
                fh.write(f"{prefix}{text[k]} {self.stamps[k]}\n")
            written += j.k1 - j.k0
        for k in np.nonzero(~held_by_a_job)[0].tolist():
            fh.write(f"{family}{{{_labels(d)}}} {text[k]} {self.stamps[k]}\n")
            written += 1
        return written

    def _parent(self, fh: TextIO, family: str, parent: Device) -> int:
        """A MIG-mode GPU's own series: the slice-weighted engine activity, no job label."""
        parts = [
            d
            for d in self.c.devices
            if (d.host, d.gpu) == (parent.host, parent.gpu) and d.instance is not None
        ]
        total = sum((self.values[d][0] * d.weight for d in parts), np.zeros(self.c.spec.n_samples))
        text = [f"{v / 100:.6f}" for v in total.tolist()]
        return self._series(fh, family, parent, np.full(len(text), -1), text)

    def new_families(self, fh: TextIO) -> dict[str, int]:
        counts = {}
        for family, help_text, kind in self.NEW_FAMILIES:
            fh.write(f"# HELP {family} {help_text}\n# TYPE {family} {kind}\n")
            counts[family] = self.family(fh, family)
        return counts


def sacct_lines(c: MigCluster) -> list[str]:
    """The MIG hosts' jobs as sacct --parsable2 rows (the generator's columns)."""
    spec = c.spec
    lines = []
    for i, j in enumerate(c.jobs):
        start, end = spec.t0 + j.k0 * spec.interval_s, spec.t0 + j.k1 * spec.interval_s
        d = j.device
        if d.profile is None:
            gres = "gres/gpu:a100=1,gres/gpu=1"
        elif i % 2:
            gres = f"gres/gpu:a100_{d.profile}=1,gres/gpu=1"
        else:
            gres = f"gres/gpu:{d.profile}=1,gres/gpu=1"
        tres = f"billing=4,cpu=4,{gres},mem=32G,node=1"
        lines.append(
            "|".join([
                j.job_id, j.job_id, "infer", j.user, "mig", "mig", "normal", "COMPLETED", "0:0",
                slurm_time(start - 60, spec.timezone), slurm_time(start, spec.timezone),
                slurm_time(end, spec.timezone), slurm_duration(end - start), "1-00:00:00", tres,
                d.host,
            ])
        )  # fmt: skip
    return lines


def truth(c: MigCluster) -> dict[str, Any]:
    spec = c.spec
    writer = MigWriter(c)
    dt = spec.interval_s
    holders = {d: np.zeros(spec.n_samples, dtype=np.int64) for d in c.devices if d.shared}
    for j in c.jobs:
        if j.device.shared:
            holders[j.device][j.k0 : j.k1] += 1
    jobs = []
    for j in c.jobs:
        d = j.device
        alloc = (j.k1 - j.k0) * dt
        share = 1.0
        if d.shared:  # each of the k jobs holding the GPU over a sample interval gets 1/k
            share = float((dt / holders[d][j.k0 : j.k1]).sum()) / alloc
        idle = (j.idle[1] - j.idle[0]) * dt if j.idle else 0
        util = None if d.shared else 0.0 if j.never_used else j.util * (alloc - idle) / alloc
        joules = float(writer.power(d)[j.k0 : j.k1].sum()) * dt * d.weight
        jobs.append(
            {
                "job_id": j.job_id,
                "user": j.user,
                "host": d.host,
                "gpu": d.gpu,
                "gpu_instance": d.instance,
                "mig_profile": d.profile,
                "gpu_model": MODEL,
                "gpu_weight": d.weight * share,
                "shared": d.shared,
                "start": iso_z(spec.t0 + j.k0 * dt),
                "end": iso_z(spec.t0 + j.k1 * dt),
                "alloc_s": alloc,
                "gpu_s": alloc * d.weight * share,
                "idle_slot_s": idle,
                "never_used": j.never_used,
                "util_mean": util,
                "energy_kwh": None if d.shared else joules / KWH,
                "mem_mib": 0 if j.never_used else j.mem_mib,
                "mem_total_mib": d.mem_mib,
            }
        )
    layout = [
        {"host": d.host, "gpu": d.gpu, "gpu_instance": d.instance, "mig_profile": d.profile}
        for d in c.devices
    ]
    return {"model": MODEL, "devices": layout, "jobs": jobs}
