"""The in-memory model of a synthetic cluster: spec, hosts, jobs, per-job plans, gaps.

All times inside the model are integer seconds relative to the window start `spec.start`
("t0"); sample k is taken at t0 + k * interval_s, for 0 <= k < spec.n_samples.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from gpuwaste.dialects import dialect
from gpuwaste.generate import params
from gpuwaste.generate.timefmt import iso_z

# Sample modes of a plan segment.
IDLE = 0  # utilization 0 and memory 0: the GPU is not used at all
BUSY = 1  # utilization around the segment's mean, memory at the phase level
STALL = 2  # utilization 0, memory held at the phase level (not idle)
FLUCT = 3  # utilization alternating between ~0 and ~100, memory at the phase level

I32 = npt.NDArray[np.int32]
I8 = npt.NDArray[np.int8]
F32 = npt.NDArray[np.float32]
F64 = npt.NDArray[np.float64]
U8 = npt.NDArray[np.uint8]
B = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class GeneratorSpec:
    """What to generate. `start` must be timezone-aware and on a whole second."""

    seed: int = 0
    gpus: int = 32  # rounded up to a multiple of 8 (hosts have 8 GPUs each)
    days: float = 1.0
    start: datetime = datetime(2026, 10, 31, 12, 0, tzinfo=UTC)
    interval_s: int = 15
    cluster: str = "demo"
    timezone: str = "UTC"  # zone in which sacct timestamps are printed (no suffix, as Slurm)
    gpu_mem_mib: int = 81920
    policy_cases: bool = False  # plant busy-then-idle and idle-then-busy jobs (policy_cases.py)
    mig_hosts: int = 0  # extra MIG hosts (gpuwaste/generate/mig.py); 0 keeps the output as it was
    shared_gpus: int = 0  # extra hosts with one time-sliced GPU (gpuwaste/generate/mig.py)
    telemetry: str = "dcgm"  # the GPU exporter's dialect (gpuwaste/dialects.py) metrics.om is in
    job_labels: bool = True  # False: the job is not on the GPU series (DCGM's default)
    # VC quotas enforced by the scheduler, and the truth of each wait's causes
    # (gpuwaste/generate/queue_truth.py); False keeps the output as it was
    vc_quotas: bool = False
    # jobs planted as busy loops (gpuwaste/generate/busy_loops.py); 0 keeps the output as it was
    busy_loops: int = 0
    # retry chains planted as Slurm requeues (gpuwaste/generate/requeues.py); 0 keeps the output
    requeues: int = 0

    def __post_init__(self) -> None:
        if self.start.tzinfo is None:
            raise ValueError("GeneratorSpec.start must be timezone-aware")
        if self.start.microsecond != 0:
            raise ValueError("GeneratorSpec.start must be on a whole second")
        if self.gpus < 1 or self.days <= 0 or self.interval_s < 1:
            raise ValueError("gpus, days and interval_s must be positive")
        if self.gpu_mem_mib < 4 * params.MIN_LEVEL_JUMP_MIB:
            raise ValueError("gpu_mem_mib is too small for distinct memory phases")
        dialect(self.telemetry)  # ValueError naming the accepted ones
        if self.telemetry != "dcgm" and (self.mig_hosts or self.shared_gpus):
            raise ValueError("MIG and shared GPUs are generated in the dcgm telemetry only")
        if self.busy_loops < 0:
            raise ValueError("busy_loops must be 0 or more")
        if self.busy_loops and (self.mig_hosts or self.shared_gpus):
            raise ValueError("busy loops are generated on whole, unshared GPUs only")
        if self.requeues < 0:
            raise ValueError("requeues must be 0 or more")
        if self.requeues and (self.vc_quotas or self.telemetry == "jobstats"):
            # the queue truth counts each run's wait from its own submission; a Jobstats
            # AdminComment is one per job id
            raise ValueError("requeues are not generated with VC quotas or Jobstats telemetry")
        if not self.job_labels and self.telemetry == "slurm-job-exporter":
            raise ValueError("slurm-job-exporter's series are per job: they always name it")

    @property
    def n_hosts(self) -> int:
        return -(-self.gpus // params.GPUS_PER_HOST)

    @property
    def n_gpus(self) -> int:
        return self.n_hosts * params.GPUS_PER_HOST

    @property
    def t0(self) -> int:
        """Window start, epoch seconds."""
        return int(self.start.timestamp())

    @property
    def n_samples(self) -> int:
        return max(1, round(self.days * 86400 / self.interval_s))

    @property
    def duration_s(self) -> int:
        """Window length in seconds; the window is [t0, t0 + duration_s)."""
        return self.n_samples * self.interval_s


@dataclass(frozen=True)
class Host:
    index: int
    name: str  # gpu-node-001
    philly_machine: str  # m17
    uuids: tuple[str, ...]
    minors: tuple[int, ...]  # device minor number (/dev/nvidiaN) of each NVML index


@dataclass(frozen=True)
class JobPlan:
    """What a job's GPUs do, sample by sample, as a run-length list of segments.

    The plan covers samples i0 .. i0 + n - 1 (the sample times t with start <= t < end, or up
    to the window end for running jobs). Every allocated GPU follows the segments, except the
    slots in `never_used`, which are idle throughout. GPU slot s holds memory
    `seg_level + gpu_offset[s]` (plus noise) wherever seg_level > 0.
    """

    i0: int
    n: int
    seg_len: I32
    seg_mode: I8
    seg_level: I32  # MiB, 0 exactly where seg_mode == IDLE
    seg_mu: F32  # mean utilization of BUSY segments
    never_used: frozenset[int]
    gpu_offset: I32  # per allocation slot, MiB
    cpu_per_gpu: float  # host CPU percent per busy GPU
    hostmem_per_gpu: float  # fraction of host memory per allocated GPU
    tags: frozenset[str]


@dataclass
class Job:
    """One Slurm job (one allocation). Times are seconds from t0."""

    index: int
    job_id: str  # JobIDRaw: the join key everywhere (DCGM hpc_job, jobs.job_id)
    slurm_job_id: str  # JobID as sacct prints it: "1234" or "1200_3" for array tasks
    user: str
    uid: int
    vc: str
    name: str
    partition: str  # "gpu" or "debug"
    qos: str
    is_debug: bool
    gpus: int
    submit: int
    start: int  # == end for jobs cancelled before they started
    end: int | None  # None while running at the window end
    # COMPLETED, CANCELLED by <uid>, FAILED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY or RUNNING
    raw_state: str
    exit_code: str
    timelimit_s: int
    alloc: list[tuple[int, int]]  # (host index, gpu index), sorted
    chain: int  # jobs of one retry chain share it (one Philly job)
    chain_pos: int
    array_id: int | None = None
    array_task: int | None = None
    typed_gres: bool = False
    steps: tuple[str, ...] = ()
    plan: JobPlan | None = None
    run: int = 0  # its run under its job id: > 0 only for a planted requeue's later runs
    last_run: bool = True  # False: a planted requeue's earlier run

    @property
    def state(self) -> str:
        return final_state(self.raw_state)

    def iso_times(self, t0: int) -> dict[str, str | None]:
        """Its submit, start and end as truth.json writes them (`end` None while running)."""
        return {
            "submit": iso_z(t0 + self.submit),
            "start": iso_z(t0 + self.start),
            "end": None if self.end is None else iso_z(t0 + self.end),
        }

    @property
    def ran(self) -> bool:
        return bool(self.alloc)


def final_state(raw_state: str) -> str:
    """Slurm state -> passed | killed | unsuccessful | running (docs/definitions.md#final-status)."""
    if raw_state == "COMPLETED":
        return "passed"
    if raw_state.startswith("CANCELLED"):
        return "killed"
    if raw_state == "RUNNING":
        return "running"
    return "unsuccessful"


@dataclass(frozen=True)
class Gap:
    """Samples gpu_global, k0 <= k < k1 are absent from the GPU exporter's series."""

    gpu: int  # global index host * 8 + gpu
    k0: int
    k1: int


@dataclass
class Window:
    """Per-GPU arrays for samples k0 .. k1-1; shape (n_gpus, k1 - k0)."""

    k0: int
    k1: int
    util: U8
    mem: I32
    job: I32  # Job.index, -1 where unallocated
    present: B  # False inside data gaps
    cpu: F32  # host CPU percent this GPU's job puts on its host


@dataclass
class Cluster:
    spec: GeneratorSpec
    hosts: list[Host]
    vcs: list[str]
    users: dict[str, tuple[int, str]]  # name -> (uid, home vc)
    jobs: list[Job]
    gaps: list[Gap] = field(default_factory=list)
    queue: dict[str, Any] | None = None  # with spec.vc_quotas: queue_truth.QueueLog.truth()
    cache: dict[str, object] = field(default_factory=dict, repr=False, compare=False)

    def host_of(self, gpu_global: int) -> Host:
        return self.hosts[gpu_global // params.GPUS_PER_HOST]
