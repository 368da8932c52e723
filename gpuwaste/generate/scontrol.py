"""The `scontrol show job -d` captures a 5-minute scheduled ingest would have taken.

One file per capture, `scontrol/<UTC time>.txt` (`20261031T120500Z.txt`), taken at
t0 + k * SCONTROL_INTERVAL_S for every k inside the window. A capture lists the jobs slurmctld
holds at that instant: the running ones (start <= t < end) with one `Nodes=` detail line per
group of consecutive nodes that hold the same GPUs, and the pending ones (submit <= t < start),
which have no node yet. Layout as scontrol prints it (tests/fixtures/scontrol/, parsed by
gpuwaste/ingest/slurm/scontrol_parse.py):

    JobId=1205 ArrayJobId=1200 ArrayTaskId=3 JobName=hp-sweep
       ...
       NodeList=gpu-node-[001-002]
       ...
         Nodes=gpu-node-001 CPU_IDs=0-31 Mem=245760 GRES=gpu:a100:2(IDX:2-3)

`IDX` is the device minor number (gres.conf `File=/dev/nvidia[0-7]`), which differs from the NVML
index on the hosts with params.SWAPPED_MINORS. Times are local to spec.timezone, as sacct's. A
job that starts and ends between two captures is in none: that is what a reader tied by captures
alone cannot see.
"""

from __future__ import annotations

import os
from pathlib import Path

from gpuwaste.generate import params
from gpuwaste.generate.model import Cluster, Job
from gpuwaste.generate.sacct import alloc_tres
from gpuwaste.generate.timefmt import compress_hostlist, compress_ints, slurm_duration, slurm_time

CPUS_PER_GPU = {False: 16, True: 8}  # batch, debug (as sacct's AllocTRES)
MEM_MIB_PER_GPU = {False: 120 * 1024, True: 64 * 1024}


def capture_times(cluster: Cluster) -> list[int]:
    """Epoch seconds of every capture inside the window."""
    spec = cluster.spec
    step = params.SCONTROL_INTERVAL_S
    return [spec.t0 + rel for rel in range(0, spec.duration_s, step)]


def running_at(job: Job, rel: int) -> bool:
    return job.ran and job.start <= rel and (job.end is None or rel < job.end)


def _gres(job: Job, n: int, idx: str | None = None) -> str:
    kind = "gpu:a100" if job.typed_gres else "gpu"
    return f"{kind}:{n}" if idx is None else f"{kind}:{n}(IDX:{idx})"


def _head(cluster: Cluster, job: Job) -> str:
    ids = f"JobId={job.job_id}"
    if job.array_id is not None:
        ids += f" ArrayJobId={job.array_id} ArrayTaskId={job.array_task}"
    uid = cluster.users[job.user][0]
    return (
        f"{ids} JobName={job.name}\n"
        f"   UserId={job.user}({uid}) GroupId={job.user}({uid}) MCS_label=N/A\n"
        f"   Priority={10000 + job.index % 997} Nice=0 Account={job.vc} QOS={job.qos}\n"
    )


def job_record(cluster: Cluster, job: Job, at: int) -> str:
    """One job's record as `scontrol show job -d` prints it at epoch `at`."""
    spec = cluster.spec
    tz = spec.timezone
    rel = at - spec.t0
    submit = slurm_time(spec.t0 + job.submit, tz)
    limit = slurm_duration(job.timelimit_s)
    if not running_at(job, rel):
        return (
            _head(cluster, job) + "   JobState=PENDING Reason=Resources Dependency=(null)\n"
            f"   RunTime=00:00:00 TimeLimit={limit} TimeMin=N/A\n"
            f"   SubmitTime={submit} EligibleTime={submit}\n"
            "   StartTime=Unknown EndTime=Unknown Deadline=N/A\n"
            f"   Partition={job.partition} AllocNode:Sid=login01:{4000 + job.index}\n"
            "   NodeList=(null)\n"
            f"   TresPerNode=gres/{_gres(job, job.gpus)}\n\n"
        )
    by_host: dict[int, list[int]] = {}
    for h, i in job.alloc:
        by_host.setdefault(h, []).append(cluster.hosts[h].minors[i])
    names = [cluster.hosts[h].name for h in sorted(by_host)]
    cpus = CPUS_PER_GPU[job.is_debug]
    mem = MEM_MIB_PER_GPU[job.is_debug]
    details: list[tuple[list[str], str]] = []  # consecutive nodes with the same line share it
    for h in sorted(by_host):
        minors = sorted(by_host[h])
        n = len(minors)
        line = f"CPU_IDs=0-{cpus * n - 1} Mem={mem * n} GRES={_gres(job, n, compress_ints(minors))}"
        if details and details[-1][1] == line:
            details[-1][0].append(cluster.hosts[h].name)
        else:
            details.append(([cluster.hosts[h].name], line))
    start = spec.t0 + job.start
    return (
        _head(cluster, job) + "   JobState=RUNNING Reason=None Dependency=(null)\n"
        "   Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0\n"
        f"   RunTime={slurm_duration(at - start)} TimeLimit={limit} TimeMin=N/A\n"
        f"   SubmitTime={submit} EligibleTime={submit}\n"
        f"   StartTime={slurm_time(start, tz)} "
        f"EndTime={slurm_time(start + job.timelimit_s, tz)} Deadline=N/A\n"
        f"   Partition={job.partition} AllocNode:Sid=login01:{4000 + job.index}\n"
        f"   NodeList={compress_hostlist(names)}\n"
        f"   BatchHost={names[0]}\n"
        f"   NumNodes={len(names)} NumCPUs={cpus * len(job.alloc)} NumTasks={len(names)} "
        f"CPUs/Task={cpus} ReqB:S:C:T=0:0:*:*\n"
        f"   TRES={alloc_tres(job, len(names), len(job.alloc), True)}\n"
        f"   JOB_GRES={_gres(job, len(job.alloc))}\n"
        + "".join(f"     Nodes={compress_hostlist(ns)} {line}\n" for ns, line in details)
        + f"   TresPerNode=gres/{_gres(job, len(job.alloc) // len(names))}\n\n"
    )


def capture_text(cluster: Cluster, at: int) -> str:
    rel = at - cluster.spec.t0
    held = [j for j in cluster.jobs if j.submit <= rel and (running_at(j, rel) or rel < j.start)]
    return "".join(job_record(cluster, j, at) for j in held)


def write_captures(cluster: Cluster, out: Path) -> list[str]:
    """Write out/scontrol/*.txt (mtime = capture time); returns the job ids seen running."""
    folder = out / "scontrol"
    folder.mkdir(parents=True, exist_ok=True)
    seen: dict[str, None] = {}
    for at in capture_times(cluster):
        path = folder / f"{slurm_time(at, 'UTC').replace('-', '').replace(':', '')}Z.txt"
        path.write_text(capture_text(cluster, at), encoding="utf-8")
        os.utime(path, (at, at))
        rel = at - cluster.spec.t0
        seen.update((j.job_id, None) for j in cluster.jobs if running_at(j, rel))
    return list(seen)
