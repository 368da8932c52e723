"""Planted Slurm requeues (`gpuwaste generate --requeues N`): jobs Slurm ran more than once under
one job id, as `sacct --duplicates` (`-D`) prints them.

N retry chains (a failed batch job and its retries, generate/workload.py) whose runs all
started, spread evenly over those there are, become one requeued job each: every run takes the
chain's first job id, in sacct.txt, the telemetry's job labels and the scontrol captures, so
that sacct prints the runs as records of one JobID, in order, each with its own Submit (Slurm
resets it at a requeue), Start, End, NodeList and state. An earlier run keeps NODE_FAIL (Slurm
requeues a job whose node failed); any other earlier state becomes REQUEUED with ExitCode 0:0,
as `scontrol requeue` leaves it (tests/fixtures/sacct/requeue_duplicates_P_written.txt). The
last run keeps its own state. With `--logs`, only the last run's log is written: Slurm's
default `slurm-<jobid>.out` is one file per job id, truncated by each run.

Without the flag nothing changes, byte for byte. truth.json's `requeues` lists each planted job
{job_id, slurm_job_id, runs: [{attempt, submit, start, end, raw_state, exit_code, gpus, hosts}]}
(attempt 0, 1, ... in run order, as `job_attempts` numbers them).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpuwaste.generate.model import Cluster, GeneratorSpec, Job


def chains(jobs: list[Job]) -> list[list[Job]]:
    """The retry chains of more than one job whose jobs all started, each in run order."""
    by_chain: dict[int, list[Job]] = {}
    for job in jobs:
        if not job.is_debug and job.array_id is None:
            by_chain.setdefault(job.chain, []).append(job)
    out = []
    for runs in by_chain.values():
        runs.sort(key=lambda j: j.chain_pos)
        if len(runs) > 1 and all(j.ran for j in runs):
            out.append(runs)
    return sorted(out, key=lambda runs: runs[0].index)


def plant(spec: GeneratorSpec, jobs: list[Job]) -> None:
    """Make `spec.requeues` retry chains (fewer if there are fewer) requeued jobs, in place."""
    if not spec.requeues:
        return
    pool = chains(jobs)
    n = min(spec.requeues, len(pool))
    if n == 0:
        return
    at = np.linspace(0, len(pool) - 1, n).round().astype(int)
    for i in at.tolist():
        runs = pool[i]
        head = runs[0]
        for number, job in enumerate(runs):
            job.job_id, job.slurm_job_id = head.job_id, head.slurm_job_id
            job.run, job.last_run = number, number == len(runs) - 1
            if not job.last_run and job.raw_state != "NODE_FAIL":
                job.raw_state, job.exit_code = "REQUEUED", "0:0"


def truth(cluster: Cluster) -> list[dict[str, Any]]:
    """truth.json's `requeues`: each requeued job's runs."""
    t0 = cluster.spec.t0
    by_id: dict[str, list[Job]] = {}
    for job in cluster.jobs:
        if job.run > 0 or not job.last_run:
            by_id.setdefault(job.job_id, []).append(job)
    return [
        {
            "job_id": job_id,
            "slurm_job_id": runs[0].slurm_job_id,
            "runs": [
                {
                    "attempt": job.run,
                    **job.iso_times(t0),
                    "raw_state": job.raw_state,
                    "exit_code": job.exit_code,
                    "gpus": job.gpus,
                    "hosts": sorted({cluster.hosts[h].name for h, _ in job.alloc}),
                }
                for job in sorted(runs, key=lambda j: j.run)
            ],
        }
        for job_id, runs in sorted(by_id.items())
    ]
