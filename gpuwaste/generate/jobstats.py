"""The Jobstats summaries (`JS1:...`) Jobstats' epilog writes into each ended job's AdminComment.

Per job that ended inside the window: per node, its CPUs and memory, and per GPU (by device
minor number) the mean utilization over the job's samples, the largest memory used and the
GPU's memory, encoded by gpuwaste/jobstats_summary.py. A job with fewer than two samples gets
Jobstats' `JS1:Short`; a running job and one cancelled before it started get none.
"""

from __future__ import annotations

import numpy as np

from gpuwaste.generate import params
from gpuwaste.generate.model import Cluster, Window
from gpuwaste.generate.scontrol import CPUS_PER_GPU, MEM_MIB_PER_GPU
from gpuwaste.jobstats_summary import GpuSummary, JobSummary, NodeSummary, encode_summary

MIB = 1 << 20


def admin_comments(cluster: Cluster, win: Window) -> dict[str, str]:
    """Job id -> AdminComment, for the jobs that ended inside the window."""
    spec = cluster.spec
    out: dict[str, str] = {}
    for job in cluster.jobs:
        plan = job.plan
        if not job.ran or job.end is None or plan is None:
            continue
        if plan.n < 2:
            out[job.job_id] = "JS1:Short"
            continue
        per_host: dict[int, list[int]] = {}
        for h, i in job.alloc:
            per_host.setdefault(h, []).append(i)
        a, b = plan.i0 - win.k0, plan.i0 + plan.n - win.k0
        nodes = []
        for h in sorted(per_host):
            host = cluster.hosts[h]
            gpus = []
            for i in sorted(per_host[h], key=lambda i: host.minors[i]):
                g = h * params.GPUS_PER_HOST + i
                seen = win.present[g, a:b]
                util = win.util[g, a:b][seen]
                mem = win.mem[g, a:b][seen]
                gpus.append(
                    GpuSummary(
                        minor=host.minors[i],
                        util_pct=float(np.mean(util)) if util.size else None,
                        mem_used_bytes=float(mem.max()) * MIB if mem.size else None,
                        mem_total_bytes=float(spec.gpu_mem_mib * MIB),
                    )
                )
            n = len(per_host[h])
            nodes.append(
                NodeSummary(
                    host=host.name,
                    gpus=tuple(gpus),
                    cpus=CPUS_PER_GPU[job.is_debug] * n,
                    mem_total_bytes=float(MEM_MIB_PER_GPU[job.is_debug] * n * MIB),
                )
            )
        summary = JobSummary(nodes=tuple(nodes), total_time_s=job.end - job.start, gpus=job.gpus)
        out[job.job_id] = encode_summary(summary)
    return out
