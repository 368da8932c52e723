"""Per-sample series from the plans: GPU utilization and memory, and host CPU and memory.

Everything here is a pure function of (spec.seed, job index, slot) or (spec.seed, host, block),
so any window of samples comes out identical however the time axis is cut.
"""

from __future__ import annotations

import numpy as np

from gpuwaste.generate import busy_loops, params
from gpuwaste.generate.model import BUSY, F32, F64, FLUCT, IDLE, STALL, Cluster, Job, Window
from gpuwaste.generate.plans import slot_levels

NOISE_BLOCK = 4096


def alloc_series(seed: int, job: Job, slot: int) -> tuple[np.ndarray, np.ndarray, F32]:
    """util (uint8, 0-100), memory used (int32 MiB) and host-CPU contribution (float32 percent)
    of allocation slot `slot` of a job, for the plan's samples."""
    plan = job.plan
    assert plan is not None
    n = plan.n
    rng = np.random.default_rng([seed, 2, job.index, slot])
    z = rng.standard_normal(n).astype(np.float32)
    side = rng.random(n) < 0.5
    low = rng.integers(0, 5, size=n)
    high = rng.integers(96, 101, size=n)
    mem_noise = rng.integers(-params.MEM_NOISE_MIB, params.MEM_NOISE_MIB + 1, size=n)
    cpu_noise = rng.standard_normal(n).astype(np.float32)
    if slot in plan.never_used:
        util = np.zeros(n, dtype=np.uint8)
        mem = np.zeros(n, dtype=np.int32)
        base = plan.cpu_per_gpu if "non_dl" in plan.tags else 0.3
        cpu = np.clip(base * (1.0 + 0.1 * cpu_noise), 0.0, None).astype(np.float32)
        return util, mem, cpu
    mode = np.repeat(plan.seg_mode, plan.seg_len)
    level = np.repeat(slot_levels(plan, slot), plan.seg_len)
    mu = np.repeat(plan.seg_mu, plan.seg_len)
    busy = np.clip(np.rint(mu + params.UTIL_NOISE_SD * z), 1, 100)
    if busy_loops.TAG in plan.tags:
        busy = busy_loops.loop_util(z)
    fl = np.where(side, low, high)
    util_f = np.where(mode == BUSY, busy, np.where(mode == FLUCT, fl, 0))
    util = util_f.astype(np.uint8)
    mem = np.where(level > 0, level + mem_noise, 0).astype(np.int32)
    weight = np.select(
        [mode == BUSY, mode == FLUCT, mode == STALL, mode == IDLE], [1.0, 0.8, 0.25, 0.03], 0.0
    ).astype(np.float32)
    cpu = np.clip(plan.cpu_per_gpu * weight * (1.0 + 0.1 * cpu_noise), 0.0, None).astype(np.float32)
    return util, mem, cpu


class _JobIndex:
    """Sample ranges of the jobs that ran, for overlap queries."""

    def __init__(self, cluster: Cluster) -> None:
        self.jobs = [j for j in cluster.jobs if j.plan is not None and j.plan.n > 0]
        self.lo = np.array([j.plan.i0 for j in self.jobs if j.plan], dtype=np.int64)
        self.hi = np.array([j.plan.i0 + j.plan.n for j in self.jobs if j.plan], dtype=np.int64)

    def overlapping(self, k0: int, k1: int) -> list[Job]:
        idx = np.nonzero((self.lo < k1) & (self.hi > k0))[0]
        return [self.jobs[int(i)] for i in idx]


def _index(cluster: Cluster) -> _JobIndex:
    ix = cluster.cache.get("job_index")
    if not isinstance(ix, _JobIndex):
        ix = _JobIndex(cluster)
        cluster.cache["job_index"] = ix
    return ix


def gpu_window(cluster: Cluster, k0: int = 0, k1: int | None = None) -> Window:
    """All GPUs' samples k0 .. k1-1 (default: the whole window). Unallocated samples are util 0,
    memory 0, job -1."""
    spec = cluster.spec
    k1 = spec.n_samples if k1 is None else k1
    g_n = spec.n_gpus
    w = k1 - k0
    util = np.zeros((g_n, w), dtype=np.uint8)
    mem = np.zeros((g_n, w), dtype=np.int32)
    job_ix = np.full((g_n, w), -1, dtype=np.int32)
    cpu = np.zeros((g_n, w), dtype=np.float32)
    present = np.ones((g_n, w), dtype=np.bool_)
    for job in _index(cluster).overlapping(k0, k1):
        plan = job.plan
        assert plan is not None
        a = max(plan.i0, k0)
        b = min(plan.i0 + plan.n, k1)
        for slot, (h, i) in enumerate(job.alloc):
            g = h * params.GPUS_PER_HOST + i
            u, m, c = alloc_series(spec.seed, job, slot)
            util[g, a - k0 : b - k0] = u[a - plan.i0 : b - plan.i0]
            mem[g, a - k0 : b - k0] = m[a - plan.i0 : b - plan.i0]
            cpu[g, a - k0 : b - k0] = c[a - plan.i0 : b - plan.i0]
            job_ix[g, a - k0 : b - k0] = job.index
    for gap in cluster.gaps:
        a, b = max(gap.k0, k0), min(gap.k1, k1)
        if a < b:
            present[gap.gpu, a - k0 : b - k0] = False
    return Window(k0, k1, util, mem, job_ix, present, cpu)


def _block_normal(seed: int, key: int, k0: int, k1: int) -> F64:
    """Standard normal noise for samples k0 .. k1-1 of stream `key`, independent of the cut."""
    parts = []
    for b in range(k0 // NOISE_BLOCK, (k1 - 1) // NOISE_BLOCK + 1):
        block = np.random.default_rng([seed, 5, key, b]).standard_normal(NOISE_BLOCK)
        lo = max(k0, b * NOISE_BLOCK) - b * NOISE_BLOCK
        hi = min(k1, (b + 1) * NOISE_BLOCK) - b * NOISE_BLOCK
        parts.append(block[lo:hi])
    return np.concatenate(parts) if parts else np.zeros(0)


def host_window(cluster: Cluster, win: Window) -> tuple[F64, F64]:
    """Host CPU utilization (percent) and used memory fraction, shape (n_hosts, samples).

    CPU = a per-host floor + the jobs' per-GPU contributions + noise; memory = a floor + the
    host memory each allocated GPU's job holds."""
    spec = cluster.spec
    g = params.GPUS_PER_HOST
    n_hosts = spec.n_hosts
    w = win.k1 - win.k0
    hostmem = np.zeros(len(cluster.jobs) + 1, dtype=np.float64)  # last entry: unallocated
    for j in cluster.jobs:
        if j.plan is not None:
            hostmem[j.index] = j.plan.hostmem_per_gpu
    per_gpu_mem = hostmem[np.where(win.job >= 0, win.job, len(cluster.jobs))]
    cpu = np.empty((n_hosts, w))
    memf = np.empty((n_hosts, w))
    for h in range(n_hosts):
        floor = 1.5 + (h * 7919 + spec.seed) % 5 * 0.4
        noise = _block_normal(spec.seed, 2 * h, win.k0, win.k1)
        c = floor + win.cpu[h * g : (h + 1) * g].sum(axis=0) + 0.8 * noise
        cpu[h] = np.clip(c, 0.2, 100.0)
        m = 0.04 + per_gpu_mem[h * g : (h + 1) * g].sum(axis=0)
        m = m + 0.002 * _block_normal(spec.seed, 2 * h + 1, win.k0, win.k1)
        memf[h] = np.clip(m, 0.02, 0.97)
    return cpu, memf
