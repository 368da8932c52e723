"""Planted cases for replaying enforcement rules (`gpuwaste generate --policy-cases`).

Every batch job that ends inside the window after running at least POLICY_MIN_S becomes one of:

- `busy_then_idle`: its GPUs work, then sit idle (utilization 0, memory 0) for the rest of the
  job while it still holds them (the job averages a rule on means misses, jobstats#28);
- `idle_then_busy`: its GPUs sit idle first (a long dataset download at 0 %), then train (what a
  "0 % for N hours" rule wrongly kills).

Odd job indices get the first, even ones the second. The idle part lasts 50-70 % of the job, so at
least 2 h, and the busy part at least 1.2 h. All the job's GPUs follow the plan (none is never
used). Without the option the generator's output is unchanged, byte for byte.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpuwaste.generate.model import BUSY, IDLE, GeneratorSpec, Job, JobPlan

POLICY_MIN_S = 4 * 3600
BUSY_THEN_IDLE = "busy_then_idle"
IDLE_THEN_BUSY = "idle_then_busy"
KINDS = (BUSY_THEN_IDLE, IDLE_THEN_BUSY)


def policy_kind(spec: GeneratorSpec, job: Job) -> str | None:
    """Which planted case `job` is, or None (also for every job without --policy-cases)."""
    if not spec.policy_cases or job.is_debug or job.end is None or not job.alloc:
        return None
    if job.end - job.start < POLICY_MIN_S:
        return None
    return KINDS[(job.index + 1) % 2]


def policy_timeline(rng: np.random.Generator, n: int, kind: str) -> list[tuple[int, int]]:
    """(mode, samples) runs of one case over the job's n samples."""
    idle = int(n * float(rng.uniform(0.5, 0.7)))
    if kind == BUSY_THEN_IDLE:
        return [(BUSY, n - idle), (IDLE, idle)]
    return [(IDLE, idle), (BUSY, n - idle)]


def switch_sample(plan: JobPlan) -> int:
    """Plan sample index where the second run starts."""
    return int(plan.seg_len[0]) if plan.seg_mode[0] == IDLE else _first_idle(plan)


def _first_idle(plan: JobPlan) -> int:
    pos = 0
    for k, mode in zip(plan.seg_len.tolist(), plan.seg_mode.tolist(), strict=True):
        if mode == IDLE:
            return pos
        pos += k
    return pos


def policy_truth(spec: GeneratorSpec, jobs: list[Job]) -> list[dict[str, Any]]:
    """truth.json's `policy_cases`: per planted job, its kind, start, end, GPUs and `switch`, the
    time of the first sample of its second run (busy -> idle or idle -> busy)."""
    from gpuwaste.generate.timefmt import iso_z

    out: list[dict[str, Any]] = []
    for job in jobs:
        kind = policy_kind(spec, job)
        if kind is None or job.plan is None or job.end is None:
            continue
        switch = spec.t0 + (job.plan.i0 + switch_sample(job.plan)) * spec.interval_s
        out.append(
            {
                "job_id": job.job_id,
                "kind": kind,
                "start": iso_z(spec.t0 + job.start),
                "end": iso_z(spec.t0 + job.end),
                "gpus": len(job.alloc),
                "switch": iso_z(switch),
            }
        )
    return out
