"""Calibration constants of the synthetic cluster, in one place.

Targets are the published Philly figures (Jeon et al., ATC 2019) where they exist: the final
status mix (60.4 % passed, 9.0 % killed, 30.5 % unsuccessful), about 1.93 GPUs per job, a median
run time near 15 minutes with a long tail, about a third of allocated GPU time at 0 %
utilization and busy GPU time with a median near 50 %. `tests/test_generate_calibration.py`
checks that a generated cluster lands near them.
"""

from __future__ import annotations

from dataclasses import dataclass

# --- cluster shape -------------------------------------------------------------------------------
GPUS_PER_HOST = 8
VC_NAMES = ("vision", "nlp", "speech", "rl", "multimodal", "robotics")
VC_WEIGHTS = (0.32, 0.28, 0.16, 0.12, 0.08, 0.04)
USER_NAMES = (
    "alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy",
    "mallory", "niaj", "olivia", "peggy", "rupert", "sybil", "trent", "victor", "walter", "wendy",
)  # fmt: skip
FIRST_UID = 1001
HOME_VC_SHARE = 0.9  # share of a user's jobs submitted in the user's home VC
MODEL_NAME = "NVIDIA A100-SXM4-80GB"
HOST_MEM_BYTES = 1_082_135_379_968  # MemTotal of a "1 TiB" node as the kernel reports it
HOST_CPUS_EXPORTED = 2  # node_cpu_seconds_total is written for cpu="0" and cpu="1" only
# Device minor numbers (/dev/nvidiaN) by NVML index on every second host, from the first: they
# need not follow the index on a real machine, and a reader that assumes they do must fail.
SWAPPED_MINORS = (2, 3, 0, 1, 6, 7, 4, 5)
SCONTROL_INTERVAL_S = 300  # `scontrol show job -d` captured at every 5-minute scheduled ingest

# --- offered load ----------------------------------------------------------------------------------
TARGET_LOAD = 0.95  # offered GPU-seconds / capacity; the queue absorbs bursts

# --- job sizes (GPUs) ------------------------------------------------------------------------------
SIZES = (1, 2, 4, 8, 16, 32, 64)
SIZE_P = (0.755, 0.095, 0.085, 0.05, 0.01, 0.003, 0.002)  # batch mean 2.07 before capping;
# with 1-GPU array tasks and small debug jobs the mean over all jobs is about 1.93
DEBUG_SIZES = (1, 2, 4)
DEBUG_SIZE_P = (0.7, 0.2, 0.1)
ARRAY_P = 0.015  # share of fresh batch submissions that are job arrays (1 GPU per task)
ARRAY_TASKS = (3, 8)  # inclusive range of tasks per array

# --- states ----------------------------------------------------------------------------------------
PHILLY_PASS, PHILLY_KILL, PHILLY_FAIL = 0.604, 0.090, 0.305
# Solved-for targets, nudged because the window edge cuts retry chains short (a retry due after
# the window end is never submitted), which moves about one point from unsuccessful to passed.
TARGET_PASS, TARGET_KILL, TARGET_FAIL = 0.595, 0.090, 0.315
DEBUG_P = 0.07  # share of fresh submissions that are debugging / interactive jobs
DEBUG_STATE_P = {"COMPLETED": 0.30, "CANCELLED": 0.35, "TIMEOUT": 0.35}
FAIL_KIND_P = {"FAILED": 0.60, "OUT_OF_MEMORY": 0.15, "NODE_FAIL": 0.07, "TIMEOUT": 0.18}
RETRY_P = 0.45  # a failed (not timed-out) batch job is resubmitted as a retry chain
RETRY_COUNTS = (1, 2, 3)
RETRY_COUNT_P = (0.5, 0.3, 0.2)
PENDING_CANCEL_P = 0.10  # share of killed batch jobs cancelled before they start
DEBUG_LIMIT_S = 8 * 3600
BATCH_TIMEOUT_LIMITS_S = (3600, 2 * 3600, 4 * 3600, 6 * 3600)
BATCH_LIMITS_S = (3600, 2 * 3600, 4 * 3600, 6 * 3600, 12 * 3600, 86400, 2 * 86400, 3 * 86400)

# --- run times (seconds): lognormal (median, sigma) by outcome --------------------------------
RUNTIME = {
    "COMPLETED": (16 * 60, 1.6),
    "CANCELLED": (24 * 60, 1.8),
    "FAILED": (6.5 * 60, 1.7),
    "DEBUG": (50 * 60, 1.0),
}
MIN_RUNTIME_S = 60
MAX_RUNTIME_S = 3 * 86400 - 1

# --- planted behaviour inside jobs (probabilities per job) -------------------------------------
SLOW_START_P = 0.15
SLOW_START_LONG_P = 0.4  # of those: >= 10 min ("long library installation")
UNRELEASED_P = 0.12
UNRELEASED_LONG_P = 0.4
MID_IDLE_P = 0.25
SHORT_ZERO_P = 0.2
STALL_P = 0.35  # stretches at 0 % utilization with memory held (not idle)
CHECKPOINT_P = 0.06
FLUCTUATING_P = 0.05
NON_DL_P = 0.05  # every GPU of the job never used, host CPU busy
OVERSUB_P = 0.3  # multi-GPU jobs with some GPUs never used
UTIL_BETA = (2.0, 2.0)  # per-phase mean utilization ~ 100 * Beta(a, b): median 50
UTIL_NOISE_SD = 7.0
MEM_NOISE_MIB = 6  # memory noise is uniform in [-MEM_NOISE_MIB, +MEM_NOISE_MIB]
MIN_LEVEL_MIB = 2048
MIN_LEVEL_JUMP_MIB = 2048  # adjacent phases differ by at least this much
GPU_OFFSET_MIB = 256  # per-GPU constant offset of a job's memory level, |offset| <= this
PHASE_MEAN_S = 90 * 60  # one extra phase per this much run time on average


@dataclass(frozen=True)
class StateMix:
    """Probabilities for a fresh batch (non-debug) job, solved so that the per-Slurm-job mix of
    all jobs (debug jobs and retry chains included) hits the Philly targets."""

    p_pass: float
    p_kill: float
    p_fail: float


def retry_mean() -> float:
    """Expected number of retries of a failed batch job (timeouts are never retried)."""
    mean_count = sum(c * p for c, p in zip(RETRY_COUNTS, RETRY_COUNT_P, strict=True))
    return (1.0 - FAIL_KIND_P["TIMEOUT"]) * RETRY_P * mean_count


def batch_state_mix() -> StateMix:
    """Solve the fresh-batch-job probabilities from the targets.

    Per fresh submission: a debug job (share d) is one Slurm job with DEBUG_STATE_P; a batch job
    is 1 + r Slurm jobs, where r > 0 only for failed jobs (all retries fail too).
    With e = retry_mean(): failed share F = (d f_d + (1-d) p_f (1+e)) / (d + (1-d)(1 + p_f e)).
    """
    d = DEBUG_P
    e = retry_mean()
    f_d = DEBUG_STATE_P["TIMEOUT"]
    # F (d + (1-d)(1 + p e)) = d f_d + (1-d) p (1+e)  ->  linear in p
    big_f = TARGET_FAIL
    p_fail = (big_f * (d + (1 - d)) - d * f_d) / ((1 - d) * ((1 + e) - big_f * e))
    total = d + (1 - d) * (1 + p_fail * e)
    p_pass = (TARGET_PASS * total - d * DEBUG_STATE_P["COMPLETED"]) / (1 - d)
    p_kill = (TARGET_KILL * total - d * DEBUG_STATE_P["CANCELLED"]) / (1 - d)
    s = p_pass + p_kill + p_fail
    return StateMix(p_pass / s, p_kill / s, p_fail / s)
