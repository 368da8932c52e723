"""simulate(spec): workload -> scheduler -> per-job plans -> data gaps, as one Cluster."""

from __future__ import annotations

import numpy as np

from gpuwaste.generate import busy_loops, requeues
from gpuwaste.generate.model import Cluster, GeneratorSpec
from gpuwaste.generate.plans import build_plan, place_gaps
from gpuwaste.generate.policy_cases import policy_kind
from gpuwaste.generate.schedule import Scheduler
from gpuwaste.generate.workload import Workload, make_hosts, make_users


def simulate(spec: GeneratorSpec) -> Cluster:
    """The in-memory model of the cluster. Series are computed on demand (series.gpu_window)."""
    hosts = make_hosts(spec, np.random.default_rng([spec.seed, 10]))
    vcs, users = make_users(spec, np.random.default_rng([spec.seed, 11]))
    workload = Workload(spec, np.random.default_rng([spec.seed, 12]), vcs, users)
    sched = Scheduler(spec, workload, np.random.default_rng([spec.seed, 13]))
    sched.run()
    jobs = sched.jobs()
    policy = {j.index for j in jobs if policy_kind(spec, j) is not None}
    loops = busy_loops.pick(spec, jobs, policy)
    for job in jobs:
        job.plan = build_plan(spec, job, job.index in loops)
        job.steps = _steps(spec.seed, job.index, job.is_debug, job.ran)
    requeues.plant(spec, jobs)
    gaps = place_gaps(spec, jobs)
    queue = sched.queue_truth(jobs)
    return Cluster(spec=spec, hosts=hosts, vcs=vcs, users=users, jobs=jobs, gaps=gaps, queue=queue)


def _steps(seed: int, index: int, debug: bool, ran: bool) -> tuple[str, ...]:
    """Which sacct step rows a job has: most batch jobs .batch/.extern (+ .0 when they use srun);
    interactive jobs .extern and .0; some jobs none (as when accounting of steps is off)."""
    if not ran:
        return ()
    u = np.random.default_rng([seed, 6, index]).random(2)
    if u[0] < 0.25:
        return ()
    if debug:
        return ("extern", "0")
    return ("batch", "extern", "0") if u[1] < 0.6 else ("batch", "extern")
