"""The planted ground truth, computed from the plans (not by re-detecting it in the series).

The conventions are stated in the package docstring (gpuwaste/generate/__init__.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpuwaste.generate import busy_loops, params, requeues
from gpuwaste.generate.model import Cluster, Job
from gpuwaste.generate.philly import PhillyView, short_hash
from gpuwaste.generate.plans import slot_levels
from gpuwaste.generate.policy_cases import policy_truth
from gpuwaste.generate.power import (
    HELD_W,
    IDLE_W,
    KWH,
    LOADED_W,
    RESET_GPU,
    power_w,
    reset_sample,
)
from gpuwaste.generate.series import alloc_series
from gpuwaste.generate.timefmt import iso_z

IDLE_SLOT_MIN_S = (
    60  # an idle slot is a run of idleness longer than this (docs/definitions.md#idle-slots)
)


@dataclass(frozen=True)
class Run:
    """A maximal run of one planted memory level on one GPU of one job, in plan samples [a, b)."""

    slot: int
    a: int
    b: int
    level: int


def slot_runs(job: Job, slot: int) -> list[Run]:
    plan = job.plan
    if plan is None or plan.n == 0:
        return []
    levels = slot_levels(plan, slot).tolist()
    runs: list[Run] = []
    pos = 0
    for k, lv in zip(plan.seg_len.tolist(), levels, strict=True):
        if k == 0:
            continue
        if runs and runs[-1].level == lv:
            last = runs[-1]
            runs[-1] = Run(slot, last.a, pos + k, lv)
        else:
            runs.append(Run(slot, pos, pos + k, lv))
        pos += k
    return runs


def run_bounds(cluster: Cluster, job: Job, run: Run) -> tuple[int, int]:
    """Epoch start (first sample of the run) and end (first sample after it, or the job's end;
    the window end for a job still running)."""
    plan = job.plan
    assert plan is not None
    spec = cluster.spec
    start = spec.t0 + (plan.i0 + run.a) * spec.interval_s
    if run.b < plan.n:
        end = spec.t0 + (plan.i0 + run.b) * spec.interval_s
    else:
        end = spec.t0 + (spec.duration_s if job.end is None else job.end)
    return start, end


def energy_truth(cluster: Cluster) -> list[dict[str, Any]]:
    """Per job x GPU with samples: the kWh its samples stand for (power x interval, samples in
    data gaps left out) and the kWh in its planted idle slots, or all of it on a never-used GPU.
    The analyses count the first sample from the job's start and the end after the last
    sample, so they differ from this by at most two samples' energy."""
    spec = cluster.spec
    dt = spec.interval_s
    gaps: dict[int, list[tuple[int, int]]] = {}
    for gap in cluster.gaps:
        gaps.setdefault(gap.gpu, []).append((gap.k0, gap.k1))
    out: list[dict[str, Any]] = []
    for job in cluster.jobs:
        plan = job.plan
        if plan is None or plan.n == 0:
            continue
        for slot, (h, i) in enumerate(job.alloc):
            g = h * params.GPUS_PER_HOST + i
            util, mem, _ = alloc_series(spec.seed, job, slot)
            loop = np.full(plan.n, busy_loops.TAG in plan.tags)
            joules = power_w(util, mem, loop).astype(np.float64) * dt
            present = np.ones(plan.n, dtype=np.bool_)
            for k0, k1 in gaps.get(g, []):
                present[max(k0 - plan.i0, 0) : max(min(k1 - plan.i0, plan.n), 0)] = False
            runs = slot_runs(job, slot)
            never = all(r.level == 0 for r in runs)
            lost = np.zeros(plan.n, dtype=np.bool_)
            if never:
                lost[:] = True
            elif len(runs) > 1:
                for r in runs:
                    start, end = run_bounds(cluster, job, r)
                    if r.level == 0 and end - start > IDLE_SLOT_MIN_S:
                        lost[r.a : r.b] = True
            out.append(
                {
                    "job_id": job.job_id,
                    "host": cluster.hosts[h].name,
                    "gpu": i,
                    "samples": int(present.sum()),
                    "energy_kwh": float(joules[present].sum()) / KWH,
                    "lost_energy_kwh": float(joules[present & lost].sum()) / KWH,
                }
            )
    return out


def power_truth(cluster: Cluster) -> dict[str, Any]:
    """truth.json's `power`: the power planted per GPU model (generate/power.py: idle, idle with
    memory held, loaded at 100 %), and where the energy counter restarts from 0 (a reboot: the
    first sample that counts from 0, whether or not the data has that sample)."""
    spec = cluster.spec
    levels = {"idle_w": IDLE_W, "held_w": HELD_W, "loaded_w": LOADED_W}
    r = reset_sample(spec)
    resets = []
    if r is not None:
        host = cluster.host_of(RESET_GPU).name
        gpu = RESET_GPU % params.GPUS_PER_HOST
        resets.append({"host": host, "gpu": gpu, "ts": iso_z(spec.t0 + r * spec.interval_s)})
    return {"models": {params.MODEL_NAME: levels}, "counter_resets": resets}


def busy_loop_truth(cluster: Cluster) -> list[dict[str, Any]]:
    """truth.json's `busy_loops`: per planted job (generate/busy_loops.py), its times, GPUs and
    the readings planted: the coarse metric, the largest SM activity and power of its samples."""
    spec = cluster.spec
    out: list[dict[str, Any]] = []
    for job in cluster.jobs:
        if job.plan is None or busy_loops.TAG not in job.plan.tags or job.end is None:
            continue
        sm, watts = 0, 0
        for slot in range(len(job.alloc)):
            util, mem, _ = alloc_series(spec.seed, job, slot)
            sm = max(sm, int(util.max(initial=0)))
            loop = np.ones(util.shape, dtype=np.bool_)
            watts = max(watts, int(power_w(util, mem, loop).max(initial=0)))
        out.append(
            {
                "job_id": job.job_id,
                "start": iso_z(spec.t0 + job.start),
                "end": iso_z(spec.t0 + job.end),
                "gpus": len(job.alloc),
                "coarse_pct": busy_loops.LOOP_COARSE_PCT,
                "sm_pct_max": sm,
                "power_w_max": watts,
            }
        )
    return out


def truth_dict(cluster: Cluster, philly: PhillyView, extra: dict[str, Any]) -> dict[str, Any]:
    spec = cluster.spec
    t0 = spec.t0
    hosts = cluster.hosts
    idle_slots: list[dict[str, Any]] = []
    short_runs: list[dict[str, Any]] = []
    never_used: list[dict[str, Any]] = []
    phases: list[dict[str, Any]] = []
    jobs_out: list[dict[str, Any]] = []
    attempts_of: dict[str, list[dict[str, Any]]] = {}
    none_end = {
        (q["jobid"], q["attempt"]) for q in philly.quirks["none_end"] if isinstance(q, dict)
    }
    none_start = {
        (q["jobid"], q["attempt"]) for q in philly.quirks["none_start"] if isinstance(q, dict)
    }
    for pj in philly.jobs:
        rows = []
        for a, job in enumerate(pj.jobs):
            assert job.end is not None
            rows.append(
                {
                    "job_id": job.job_id,
                    "start": None if (pj.jobid, a) in none_start else iso_z(t0 + job.start),
                    "end": None if (pj.jobid, a) in none_end else iso_z(t0 + job.end),
                    "detail": pj.attempts[a]["detail"],
                }
            )
        attempts_of[pj.jobid] = rows

    for job in cluster.jobs:
        pid, pa = philly.by_job.get(job.index, (None, None))
        jobs_out.append(
            {
                "job_id": job.job_id,
                "job_id_raw": job.job_id,
                "slurm_job_id": job.slurm_job_id,
                "array_job_id": None if job.array_id is None else str(job.array_id),
                "array_task": job.array_task,
                "philly_jobid": pid,
                "philly_attempt": None if pa is None or pa < 0 else pa,
                "user": job.user,
                "vc": job.vc,
                "name": job.name,
                "partition": job.partition,
                "qos": job.qos,
                "state": job.state,
                "raw_state": job.raw_state,
                "exit_code": job.exit_code,
                "is_debug": job.is_debug,
                **job.iso_times(t0),
                "timelimit_s": job.timelimit_s,
                "gpus": job.gpus,
                "alloc": [
                    {
                        "host": hosts[h].name,
                        "gpu": g,
                        "minor": hosts[h].minors[g],
                        "uuid": hosts[h].uuids[g],
                    }
                    for h, g in job.alloc
                ],
                "attempts": attempts_of.get(pid, []) if pid else [],
                "planted": sorted(job.plan.tags) if job.plan else [],
                "first_sample": (
                    iso_z(t0 + job.plan.i0 * spec.interval_s) if job.plan and job.plan.n else None
                ),
                "n_samples": job.plan.n if job.plan else 0,
            }
        )
        if job.plan is None or job.plan.n == 0:
            continue
        for slot, (h, g) in enumerate(job.alloc):
            where = {"job_id": job.job_id, "host": hosts[h].name, "gpu": g}
            runs = slot_runs(job, slot)
            if all(r.level == 0 for r in runs):
                never_used.append(dict(where))
            for r in runs:
                start, end = run_bounds(cluster, job, r)
                item = {**where, "start": iso_z(start), "end": iso_z(end)}
                phases.append({**item, "mem_mib": r.level})
                if r.level == 0 and len(runs) > 1:
                    (idle_slots if end - start > IDLE_SLOT_MIN_S else short_runs).append(item)

    g8 = params.GPUS_PER_HOST
    planted_policy = {"policy_cases": policy_truth(spec, cluster.jobs)} if spec.policy_cases else {}
    planted_loops = {"busy_loops": busy_loop_truth(cluster)} if spec.busy_loops else {}
    planted_requeues = {"requeues": requeues.truth(cluster)} if spec.requeues else {}
    return {
        **planted_policy,
        **planted_loops,
        **planted_requeues,
        "spec": {
            "seed": spec.seed,
            "gpus": spec.n_gpus,
            "gpus_requested": spec.gpus,
            "days": spec.days,
            "start": iso_z(t0),
            "interval_s": spec.interval_s,
            "cluster": spec.cluster,
            "timezone": spec.timezone,
            "gpu_mem_mib": spec.gpu_mem_mib,
        },
        "window": {
            "start": iso_z(t0),
            "end": iso_z(t0 + spec.duration_s),
            "n_samples": spec.n_samples,
            "interval_s": spec.interval_s,
        },
        "hosts": [
            {
                "name": h.name,
                "philly_machine": h.philly_machine,
                "gpus": [{"gpu": i, "minor": h.minors[i], "uuid": h.uuids[i]} for i in range(g8)],
            }
            for h in hosts
        ],
        "philly_machine_map": {h.name: h.philly_machine for h in hosts},
        "philly_vc_map": {v: short_hash(v) for v in cluster.vcs},
        "philly_user_map": {u: short_hash(u) for u in cluster.users},
        "philly_quirks": {**philly.quirks, **extra},
        "users": {u: {"uid": uid, "home_vc": vc} for u, (uid, vc) in cluster.users.items()},
        "jobs": jobs_out,
        "idle_slots": idle_slots,
        "short_zero_runs": short_runs,
        "never_used": never_used,
        "phases": phases,
        "energy": energy_truth(cluster),
        "power": power_truth(cluster),
        "gaps": [
            {
                "host": cluster.host_of(gap.gpu).name,
                "gpu": gap.gpu % g8,
                "start": iso_z(t0 + gap.k0 * spec.interval_s),
                "end": iso_z(t0 + gap.k1 * spec.interval_s),
            }
            for gap in cluster.gaps
        ],
        **({"queue": cluster.queue} if cluster.queue is not None else {}),
        "debug_jobs": [j.job_id for j in cluster.jobs if j.is_debug],
        "timeouts": [
            j.job_id
            for j in cluster.jobs
            if j.raw_state == "TIMEOUT"
            and j.end is not None
            and j.end - j.start == params.DEBUG_LIMIT_S
        ],
    }


def truth_text(truth: dict[str, Any]) -> str:
    return json.dumps(truth, sort_keys=True, indent=1) + "\n"
