"""Job logs with planted failures (`gpuwaste generate --logs`): `logs/slurm-<JobID>.out` (and
`.err`) as Slurm names them by default, and the reason each failed attempt must get.

Every job that ran and ended gets a log of training output. A FAILED job's log ends in the error
of one reason of Philly Table 7, taken in turn (`LOG_ERRORS`, the tools' own messages), or in
nothing at all (`no signature`); every third failed job writes its error to the `.err` file
beside a plain `.out`. The other failed states get a log too, whose text the scheduler's reason
outranks (a time-limit kill line, an oom_kill line, a traceback cut by a node failure). One log
holds bytes that are not UTF-8 and one ends without a newline. Deterministic: no randomness
beyond the job order. Written only with the flag, so the other outputs stay as they were.

Truth (`truth.json` `failure_logs`): per failed Slurm job, {job_id, slurm_job_id, files, reason}.
The reason is written here by hand from the job's state, exit code and planted error, as
docs/definitions.md#failures says, not by running the rules.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuwaste.generate.model import Cluster, Job

# reason -> the last lines of a log that failed for it (real message formats)
LOG_ERRORS: dict[str, list[str]] = {
    "GPU OOM": [
        "Traceback (most recent call last):",
        '  File "/home/{user}/train.py", line 214, in <module>',
        "    loss.backward()",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
        "total capacity of 79.15 GiB of which 1.02 GiB is free.",
    ],
    "CPU OOM": [
        "slurmstepd: error: Detected 1 oom_kill event in StepId={job}.batch. Some of the step "
        "tasks have been OOM Killed.",
    ],
    "incorrect inputs": [
        "Traceback (most recent call last):",
        '  File "/home/{user}/data.py", line 41, in __getitem__',
        "FileNotFoundError: [Errno 2] No such file or directory: '/data/imagenet/train/"
        "shard-0042.tar'",
    ],
    "semantic error": [
        "Traceback (most recent call last):",
        '  File "/home/{user}/model.py", line 77, in forward',
        "TypeError: forward() missing 1 required positional argument: 'mask'",
    ],
    "core dump": [
        "/var/spool/slurmd/job{job}/slurm_script: line 12: 48213 Segmentation fault      "
        "(core dumped) python train.py",
    ],
    "invalid memory access": [
        "Traceback (most recent call last):",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        "CUDA kernel errors might be asynchronously reported at some other API call, so the "
        "stacktrace below might be incorrect.",
    ],
    "model checkpoint error": [
        "Traceback (most recent call last):",
        "RuntimeError: Error(s) in loading state_dict for ResNet:",
        '\tMissing key(s) in state_dict: "fc.weight", "fc.bias".',
    ],
    "CUDA failure": [
        "Traceback (most recent call last):",
        "RuntimeError: CUDA error: unspecified launch failure",
    ],
    "syntax error": [
        '  File "/home/{user}/train.py", line 88',
        '    print "epoch", epoch',
        "    ^^^^^^^^^^^^^^^^^^^^",
        "SyntaxError: Missing parentheses in call to 'print'. Did you mean print(...)?",
    ],
    "traceback from crash": [
        "Traceback (most recent call last):",
        '  File "/opt/conda/lib/python3.10/site-packages/torch/utils/data/dataloader.py", '
        "line 1133, in _try_get_data",
        "RuntimeError: DataLoader worker (pid(s) 4123) exited unexpectedly",
    ],
    "MPI error": [
        "MPI_ABORT was invoked on rank 3 in communicator MPI_COMM_WORLD",
        "with errorcode 1.",
    ],
    "MPI runtime failure": [
        "ORTE has lost communication with a remote daemon.",
    ],
    "permission error": [
        "Traceback (most recent call last):",
        "PermissionError: [Errno 13] Permission denied: '/shared/checkpoints/run7/model.pt'",
    ],
    "import error": [
        "Traceback (most recent call last):",
        '  File "/home/{user}/train.py", line 3, in <module>',
        "ModuleNotFoundError: No module named 'apex'",
    ],
    "job preempted": [
        "slurmstepd: error: *** JOB {job} ON {host} CANCELLED AT 2026-11-01T03:12:44 DUE TO "
        "PREEMPTION ***",
    ],
    "CUDA init failed": [
        "Traceback (most recent call last):",
        "RuntimeError: CUDA error: no CUDA-capable device is detected",
    ],
    "model diverged": [
        "epoch 3 step 1200 loss: nan lr 0.1",
        "FloatingPointError: Loss is nan, stopping training",
    ],
    "CUDA version mismatch": [
        "RuntimeError: The NVIDIA driver on your system is too old (found version 11040).",
    ],
    "GPU ECC error": [
        "Traceback (most recent call last):",
        "RuntimeError: CUDA error: uncorrectable ECC error encountered",
    ],
    "output node error": [
        "Traceback (most recent call last):",
        "OSError: [Errno 28] No space left on device",
    ],
    "cannot load libraries": [
        "Traceback (most recent call last):",
        "ImportError: libcudart.so.11.0: cannot open shared object file: No such file or directory",
    ],
}
NO_SIGNATURE = "no signature"
PLANTED = (*LOG_ERRORS, NO_SIGNATURE)  # the order failed jobs take them in

# what outranks the log (docs/definitions.md#failures), and the text such a job's log ends with
_SCHEDULER_TEXT = {
    "TIMEOUT": "slurmstepd: error: *** JOB {job} ON {host} CANCELLED AT 2026-11-01T04:00:00 DUE "
    "TO TIME LIMIT ***",
    "OUT_OF_MEMORY": LOG_ERRORS["CPU OOM"][0],
    "NODE_FAIL": "Traceback (most recent call last):",
    "CANCELLED": "slurmstepd: error: *** JOB {job} ON {host} CANCELLED AT 2026-11-01T05:00:00 ***",
}
_CORE_SIGNALS = (4, 6, 7, 8, 11)


def _training_lines(job: Job, n: int) -> list[str]:
    return [f"[rank0] epoch {i // 50} step {i * 20} loss {2.5 / (1 + i):.4f}" for i in range(n)]


def scheduler_reason(job: Job, admin_uids: tuple[int, ...] = (0,)) -> str | None:
    """The reason the scheduler's record gives, by hand from the state (None for FAILED)."""
    state = job.raw_state.split()[0]
    if state == "CANCELLED":
        uid = int(job.raw_state.split()[-1])
        return "cancelled by admin" if uid in admin_uids else "cancelled by user"
    return {
        "TIMEOUT": "time limit",
        "OUT_OF_MEMORY": "CPU OOM",
        "NODE_FAIL": "node failure",
    }.get(state)


def _signal_reason(exit_code: str) -> str:
    code, signal = (int(part) for part in exit_code.split(":"))
    if not signal and 128 < code <= 128 + 64:  # bash's status for a command killed by a signal
        signal = code - 128
    if signal in _CORE_SIGNALS:
        return "core dump"
    return "killed by a signal" if signal else NO_SIGNATURE


def write_failure_logs(cluster: Cluster, out: Path) -> list[dict[str, Any]]:
    """Write `out/slurm-*.out|.err` for every job that ran and ended; the truth of the failed."""
    out.mkdir(parents=True, exist_ok=True)
    truth: list[dict[str, Any]] = []
    failed = 0
    odd_bytes = no_newline = False
    for job in cluster.jobs:
        if not job.ran or job.end is None or not job.last_run:  # a requeue's last run: its file
            continue
        fill = {
            "job": job.slurm_job_id,
            "user": job.user,
            "host": cluster.hosts[job.alloc[0][0]].name,
        }
        lines = _training_lines(job, 3 + job.index % 5)
        err_lines: list[str] = []
        base = job.raw_state.split()[0]
        reason: str | None = None
        if base == "FAILED":
            planted = PLANTED[failed % len(PLANTED)]
            failed += 1
            tail = [t.format(**fill) for t in LOG_ERRORS.get(planted, [])]
            if failed % 3 == 0 and tail:
                err_lines = tail  # stderr apart, as with `sbatch --error`
            else:
                lines += tail
            reason = planted if planted != NO_SIGNATURE else _signal_reason(job.exit_code)
        elif base != "COMPLETED":
            lines.append(_SCHEDULER_TEXT[base].format(**fill))
            reason = scheduler_reason(job)
        data = ("\n".join(lines) + "\n").encode()
        if not odd_bytes and base == "FAILED":
            data = b"caf\xe9 \xff\xfe progress\n" + data  # Latin-1 and stray bytes
            odd_bytes = True
        elif not no_newline and base == "COMPLETED":
            data = data.rstrip(b"\n")  # killed mid-line: no newline at the end
            no_newline = True
        files = [f"slurm-{job.slurm_job_id}.out"]
        (out / files[0]).write_bytes(data)
        if err_lines:
            files.append(f"slurm-{job.slurm_job_id}.err")
            (out / files[1]).write_text("\n".join(err_lines) + "\n", encoding="utf-8")
        if reason is not None:
            truth.append(
                {
                    "job_id": job.job_id,
                    "slurm_job_id": job.slurm_job_id,
                    "files": files,
                    "reason": reason,
                }
            )
    return truth
