"""`sacct --parsable2` output with a header, as Slurm prints it without --allocations.

Fields: JobID|JobIDRaw|JobName|User|Account|Partition|QOS|State|ExitCode|Submit|Start|End|Elapsed|
Timelimit|AllocTRES|NodeList. Times are local to spec.timezone with no suffix. Array tasks print
JobID `<array id>_<task>` with their own JobIDRaw. Step rows (`.batch`, `.extern`, `.0`) follow
their job for the jobs that have them, with an empty User, Partition and QOS. A job still running
at the window end has End `Unknown` and Elapsed counted to the window end; a job cancelled before
it started has Start == End, Elapsed 00:00:00, no AllocTRES and NodeList `None assigned`.
For `--telemetry jobstats` a last column AdminComment holds each ended job's Jobstats summary
(gpuwaste/generate/jobstats.py).
"""

from __future__ import annotations

import numpy as np

from gpuwaste.generate.model import Cluster, Job
from gpuwaste.generate.timefmt import compress_hostlist, slurm_duration, slurm_time

HEADER = (
    "JobID|JobIDRaw|JobName|User|Account|Partition|QOS|State|ExitCode|Submit|Start|End|Elapsed|"
    "Timelimit|AllocTRES|NodeList"
)


def alloc_tres(job: Job, n_nodes: int, gpus: int, billing: bool) -> str:
    """AllocTRES as sacct prints it (scontrol's TRES= too)."""
    per_cpu = 8 if job.is_debug else 16
    per_mem = 64 if job.is_debug else 120
    cpus = per_cpu * gpus
    parts = []
    if billing:
        parts.append(f"billing={cpus}")
    parts.append(f"cpu={cpus}")
    if job.typed_gres:
        parts.append(f"gres/gpu:a100={gpus}")
        if job.index % 2 == 0:  # some Slurm versions print both the typed and the plain count
            parts.append(f"gres/gpu={gpus}")
    else:
        parts.append(f"gres/gpu={gpus}")
    parts += [f"mem={per_mem * gpus}G", f"node={n_nodes}"]
    return ",".join(parts)


_STEP_STATE = {
    # job state -> (batch step state, batch exit, .0 step state, .0 exit)
    "COMPLETED": ("COMPLETED", "0:0", "COMPLETED", "0:0"),
    "TIMEOUT": ("CANCELLED", "0:15", "CANCELLED", "0:15"),
    "NODE_FAIL": ("CANCELLED", "0:9", "NODE_FAIL", "0:0"),
    "OUT_OF_MEMORY": ("OUT_OF_MEMORY", "0:125", "OUT_OF_MEMORY", "0:125"),
    "RUNNING": ("RUNNING", "0:0", "RUNNING", "0:0"),
    "REQUEUED": ("CANCELLED", "0:15", "CANCELLED", "0:15"),  # a requeued run (--requeues)
}


def job_rows(cluster: Cluster, job: Job) -> list[str]:
    spec = cluster.spec
    tz = spec.timezone
    t0 = spec.t0

    def ts(rel: int) -> str:
        return slurm_time(t0 + rel, tz)

    if not job.ran:
        return [
            "|".join([
                job.slurm_job_id, job.job_id, job.name, job.user, job.vc, job.partition, job.qos,
                job.raw_state, job.exit_code, ts(job.submit), ts(job.start), ts(job.start),
                "00:00:00", slurm_duration(job.timelimit_s), "", "None assigned",
            ])
        ]  # fmt: skip
    hosts = sorted({cluster.hosts[h].name for h, _ in job.alloc})
    nodelist = compress_hostlist(hosts)
    end_rel = spec.duration_s if job.end is None else job.end
    end = "Unknown" if job.end is None else ts(job.end)
    elapsed = slurm_duration(end_rel - job.start)
    rows = [
        "|".join([
            job.slurm_job_id, job.job_id, job.name, job.user, job.vc, job.partition, job.qos,
            job.raw_state, job.exit_code, ts(job.submit), ts(job.start), end, elapsed,
            slurm_duration(job.timelimit_s), alloc_tres(job, len(hosts), len(job.alloc), True),
            nodelist,
        ])
    ]  # fmt: skip
    if not job.steps:
        return rows
    rng = np.random.default_rng([spec.seed, 7, job.index])
    base = job.raw_state.split()[0]
    if base == "CANCELLED":
        b_state, b_exit, s_state, s_exit = "CANCELLED", "0:15", job.raw_state, "0:15"
    elif base == "FAILED":
        b_state, b_exit, s_state, s_exit = "FAILED", job.exit_code, "FAILED", job.exit_code
    else:
        b_state, b_exit, s_state, s_exit = _STEP_STATE[base]
    first_host_gpus = sum(1 for h, _ in job.alloc if cluster.hosts[h].name == hosts[0])
    for step in job.steps:
        sid, sraw = f"{job.slurm_job_id}.{step}", f"{job.job_id}.{step}"
        s_start, s_end_rel = job.start, end_rel
        late = int(rng.integers(0, 3)) if job.end is not None else 0  # steps can outlive the job
        if step == "batch":
            state, code = b_state, b_exit
            tres = alloc_tres(job, 1, first_host_gpus, False)
            nodes = hosts[0]
            name = "batch"
            s_end_rel += late
        elif step == "extern":
            state, code = ("RUNNING", "0:0") if job.end is None else ("COMPLETED", "0:0")
            tres = alloc_tres(job, len(hosts), len(job.alloc), True)
            nodes = nodelist
            name = "extern"
            s_end_rel += late
        else:
            state, code = s_state, s_exit
            tres = alloc_tres(job, len(hosts), len(job.alloc), False)
            nodes = nodelist
            name = (
                "python"
                if not job.is_debug
                else ("jupyter-lab" if job.name == "jupyter" else "bash")
            )
            s_start = min(job.start + int(rng.integers(2, 20)), end_rel)
        s_end = "Unknown" if job.end is None else ts(s_end_rel)
        rows.append(
            "|".join([
                sid, sraw, name, "", job.vc, "", "", state, code, ts(s_start), ts(s_start), s_end,
                slurm_duration(s_end_rel - s_start), "", tres, nodes,
            ])
        )  # fmt: skip
    return rows


def sacct_text(cluster: Cluster, admin_comments: dict[str, str] | None = None) -> str:
    """With `admin_comments` (job id -> text), a last column AdminComment: the job row's text,
    empty for its steps and for jobs without one."""
    if admin_comments is None:
        lines = [HEADER]
        for job in cluster.jobs:
            lines += job_rows(cluster, job)
        return "\n".join(lines) + "\n"
    lines = [HEADER + "|AdminComment"]
    for job in cluster.jobs:
        rows = job_rows(cluster, job)
        lines.append(rows[0] + "|" + admin_comments.get(job.job_id, ""))
        lines += [r + "|" for r in rows[1:]]
    return "\n".join(lines) + "\n"
