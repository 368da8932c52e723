"""Planted busy loops (`gpuwaste generate --busy-loops N`): jobs that keep their GPUs "busy"
without working, as a GPU keeper script does (a tiny kernel always running, dstack#2359).

N batch jobs that ended inside the window after running at least `LOOP_MIN_S`, spread evenly
over the eligible jobs, hold memory on every GPU for the whole job while:

- the coarse busy metric (the dialect's device-level utilization, DCGM's `DCGM_FI_DEV_GPU_UTIL`,
  nvidia-smi's `utilization.gpu`) reads `LOOP_COARSE_PCT` (100) on every sample;
- the real work, the generator's `util` (written as SM activity where the dialect has it:
  DCGM's `DCGM_FI_PROF_SM_ACTIVE`, Jobstats' `nvidia_gpu_sm_util_percent`), is 1-2 %;
- power is the model's memory-held power plus the work's share of the load range
  (generate/power.py `power_w`): about 3.5 x the idle power.

With busy loops the dialect's SM-activity family is written for every GPU (equal to `util`
outside busy loops, so every other job reads the same); without, the output is unchanged byte
for byte. truth.json's `busy_loops` lists the planted jobs (job_id, start, end, gpus,
coarse_pct, sm_pct_max, power_w_max). MIG and shared GPUs, and the parquet writer, have no busy
loops (GeneratorSpec refuses the combination).
"""

from __future__ import annotations

import numpy as np

from gpuwaste.generate.model import B, Cluster, GeneratorSpec, Job

LOOP_MIN_S = 30 * 60  # long enough for tens of samples at any usual interval
LOOP_COARSE_PCT = 100  # GPU_UTIL of a busy loop: a kernel is always running
LOOP_SM_PCT = (1, 2)  # its SM activity: one or two SMs of about a hundred busy
TAG = "busy_loop"


def eligible(job: Job) -> bool:
    """A batch job that ran and ended inside the window, long enough to judge."""
    return (
        not job.is_debug
        and bool(job.alloc)
        and job.end is not None
        and job.end - job.start >= LOOP_MIN_S
    )


def pick(spec: GeneratorSpec, jobs: list[Job], policy: set[int]) -> frozenset[int]:
    """The indices of the jobs planted as busy loops: `spec.busy_loops` of the eligible jobs
    (not policy cases, `policy`), evenly spaced among them; fewer if there are fewer."""
    if not spec.busy_loops:
        return frozenset()
    pool = [j.index for j in jobs if eligible(j) and j.index not in policy]
    n = min(spec.busy_loops, len(pool))
    if n == 0:
        return frozenset()
    at = np.linspace(0, len(pool) - 1, n).round().astype(int)
    return frozenset(pool[i] for i in at.tolist())


def loop_util(z: np.ndarray) -> np.ndarray:
    """The SM activity (the generator's `util`, uint8) of a busy loop's samples, from standard
    normal noise `z`: 1 %, 2 % on about one sample in six."""
    low, high = LOOP_SM_PCT
    return np.where(z > 1.0, high, low).astype(np.uint8)


def loop_jobs(cluster: Cluster) -> np.ndarray:
    """The indices of the busy-loop jobs (int32, sorted; empty without --busy-loops)."""
    got = cluster.cache.get("busy_loop_jobs")
    if not isinstance(got, np.ndarray):
        got = np.array(
            sorted(j.index for j in cluster.jobs if j.plan is not None and TAG in j.plan.tags),
            dtype=np.int32,
        )
        cluster.cache["busy_loop_jobs"] = got
    return got


def loop_mask(cluster: Cluster, job_row: np.ndarray) -> B | None:
    """Which samples (job index per sample, -1 unallocated) belong to a busy loop; None when the
    cluster has none (the default output is computed as before)."""
    idx = loop_jobs(cluster)
    if not idx.size:
        return None
    return np.isin(job_row, idx)


def coarse_util(cluster: Cluster, util_row: np.ndarray, job_row: np.ndarray) -> np.ndarray:
    """The coarse busy metric of samples: `util`, but LOOP_COARSE_PCT inside busy loops."""
    mask = loop_mask(cluster, job_row)
    if mask is None:
        return util_row
    return np.where(mask, LOOP_COARSE_PCT, util_row).astype(util_row.dtype)
