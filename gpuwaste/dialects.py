"""GPU telemetry dialects: which series of which exporter fill `gpu_samples`, as data.

One `Dialect` per exporter a site may run. A declaration says which series give utilization
(in order of preference, with their scale to 0-100 and the largest raw value believed), memory
used and total (-> MiB), power (-> W), the energy counter (-> J, stored as `energy_j`), the
profiling metrics, which labels name the host, the GPU (index, device minor number, uuid, model,
MIG instance and profile), and where the job comes from: a label, a companion gauge whose value
is the job id, or nothing. `ingest.prometheus.rows` reads every dialect through its declaration,
and the generator writes every dialect from the same declarations: adding a dialect is a new
declaration here, fixtures and tests (docs/architecture.md, "To add a telemetry dialect").

Pure data: this module imports no gpuwaste layer (a shared module, as `config` and `errors`).
The metric and label names were read in each exporter's own source; docs/ingest-prometheus.md
names the file and commit of each.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

MAX_MIB = 16 * 1024 * 1024  # 16 TiB of GPU memory: anything above is a sentinel, not a reading
MAX_W = 100_000.0  # 100 kW for one GPU: anything above is a sentinel
MIB = 1024.0 * 1024.0
# Board power limits (W) by a fragment of the model name (lower case; the first match wins),
# from the vendors' data sheets: a reading above twice its model's limit is not a reading.
POWER_LIMITS_W: tuple[tuple[str, float], ...] = (
    ("b200", 1000.0),
    ("h200", 700.0),
    ("h100 pcie", 350.0),
    ("h100", 700.0),
    ("a100-pcie", 300.0),
    ("a100", 400.0),
    ("a30", 165.0),
    ("l40s", 350.0),
    ("l40", 300.0),
    ("l4", 72.0),
    ("v100", 300.0),
    ("mi300x", 750.0),
    ("mi250", 560.0),
)


def power_limit_w(model: str | None) -> float | None:
    """The board power limit of GPU `model` (a modelName), None where it is not in the table."""
    name = (model or "").lower()
    return next((w for fragment, w in POWER_LIMITS_W if fragment in name), None)


@dataclass(frozen=True)
class Series:
    """One quantity: the metric names that carry it (alternatives, as exporters rename series
    between releases: the first present is read), what a raw value is multiplied by to give the
    stored unit, and the largest raw value believed (above it: refused as out of range)."""

    names: tuple[str, ...]
    scale: float = 1.0
    maximum: float = float("inf")

    @property
    def name(self) -> str:
        """The current name (the first)."""
        return self.names[0]


@dataclass(frozen=True)
class UtilSeries(Series):
    """A utilization series: `column` names it among the dialect's utilizations (DCGM:
    `sm_active`, `gr_active`, `gpu_util`). `gpu_util` is the coarse busy metric, "a kernel ran
    in the period" (DCGM_FI_DEV_GPU_UTIL, nvidia-smi's utilization.gpu): it is also stored as
    gpu_samples.gpu_util, beside the best utilization, for the looks-busy diagnosis. `on_mig` says whether it is a MIG instance's own
    utilization (DCGM's GPU_UTIL reads 0 on one, dcgm-exporter#216: never)."""

    column: str = "util"
    on_mig: bool = True


@dataclass(frozen=True)
class Labels:
    """Label names. `host`: the first present, else `instance` without its port. `gpu`: the
    GPU index (NVML's, except where `gpu_is_job_local`). `minor`: the device minor number
    (`/dev/nvidiaN`, the `IDX` of Slurm's gres), its value with `minor_prefix` removed (DCGM's
    `device="nvidia3"` -> 3); None where the dialect does not give it. MIG: `gpu_instance` and
    `mig_profile` beside the parent's `gpu`."""

    host: tuple[str, ...] = ()
    gpu: str | None = None
    minor: str | None = None
    minor_prefix: str = ""
    uuid: str | None = None
    model: str | None = None
    gpu_instance: str | None = None
    mig_profile: str | None = None
    node_instance: str = "instance"
    # the MIG profile is the end of the model label ("NVIDIA A100-SXM4-80GB MIG 1g.10gb": NVML's
    # name of a MIG device), the model before " MIG " (Jobstats' exporter has no profile label)
    mig_profile_in_model: bool = False


@dataclass(frozen=True)
class InfoSeries:
    """A series of value 1 whose labels describe a GPU (nvidia-smi's `nvidia_smi_gpu_info`),
    joined to the value series on `on` (and the host): its `gpu` and `model` labels give the
    index and the model the value series lack."""

    name: str
    on: str
    gpu: str | None = None
    model: str | None = None


@dataclass(frozen=True)
class JobGauge:
    """A companion gauge whose VALUE is the job running on a GPU (older Jobstats:
    `nvidia_gpu_jobId{minor_number=...}`), joined to the value series on the labels `on` (and
    the host) at each scrape; the value `none` means no job."""

    name: str
    on: tuple[str, ...]
    none: float = 0.0


JobFrom = Literal["label", "gauge", "none"]


@dataclass(frozen=True)
class Job:
    """Where a sample's job comes from: `label` (the first of `labels` present; for DCGM the
    pod labels of `PrometheusLabels` too), `gauge` (`gauge`, a `JobGauge`, where no label names
    it), or `none` (the dialect never names the job: captures or whole-host rules tie jobs)."""

    source: JobFrom
    labels: tuple[str, ...] = ()
    gauge: JobGauge | None = None


@dataclass(frozen=True)
class Dialect:
    """One exporter's series -> `gpu_samples` (see the module docstring)."""

    name: str  # as `telemetry = NAME` and `--telemetry NAME` say it
    title: str  # the exporter, for messages
    util: tuple[UtilSeries, ...]  # in order of preference
    mem_used: Series  # -> MiB
    labels: Labels
    job: Job
    # memory total: `mem_total` when declared, else used + free + reserved (reserved 0 if absent)
    mem_total: Series | None = None
    mem_free: Series | None = None
    mem_reserved: Series | None = None
    power: Series | None = None  # -> W
    energy: Series | None = None  # a counter -> J (gpu_samples.energy_j; analyses/energy.py)
    sm_active: Series | None = None  # -> percent (DCGM: the SM_ACTIVE utilization itself)
    tensor_active: Series | None = None  # -> percent
    info: InfoSeries | None = None
    gpu_is_job_local: bool = False  # `gpu` is the job's own index, not the host's
    labels_configurable: bool = False  # [clusters.prometheus.labels] overrides `labels`
    notes: tuple[str, ...] = field(default=())  # lossier points, for the docs

    def value_series(self) -> tuple[Series, ...]:
        """Every declared series that gives a column, utilization first."""
        extra = (
            self.mem_used,
            self.mem_total,
            self.mem_free,
            self.mem_reserved,
            self.sm_active,
            self.tensor_active,
            self.power,
            self.energy,
        )
        return (*self.util, *(s for s in extra if s is not None))

    def families(self) -> tuple[str, ...]:
        """Every metric name the dialect reads (all alternatives), in declaration order."""
        names: list[str] = []
        for s in self.value_series():
            names.extend(n for n in s.names if n not in names)
        for extra in (
            self.info.name if self.info else None,
            self.job.gauge.name if self.job.gauge else None,
        ):
            if extra is not None and extra not in names:
                names.append(extra)
        return tuple(names)

    def markers(self) -> tuple[str, ...]:
        """The series whose presence says a source holds this dialect: its utilizations and
        memory used (every alternative)."""
        names: list[str] = []
        for s in (*self.util, self.mem_used):
            names.extend(n for n in s.names if n not in names)
        return tuple(names)


_RATIO = 100.0  # a 0-1 ratio -> percent

DCGM = Dialect(
    name="dcgm",
    title="NVIDIA DCGM exporter",
    util=(
        UtilSeries(("DCGM_FI_PROF_SM_ACTIVE",), _RATIO, 1.0, column="sm_active"),
        UtilSeries(("DCGM_FI_PROF_GR_ENGINE_ACTIVE",), _RATIO, 1.0, column="gr_active"),
        UtilSeries(("DCGM_FI_DEV_GPU_UTIL",), 1.0, 100.0, column="gpu_util", on_mig=False),
    ),
    mem_used=Series(("DCGM_FI_DEV_FB_USED",), 1.0, MAX_MIB),  # MiB
    mem_free=Series(("DCGM_FI_DEV_FB_FREE",), 1.0, MAX_MIB),
    mem_reserved=Series(("DCGM_FI_DEV_FB_RESERVED",), 1.0, MAX_MIB),
    power=Series(("DCGM_FI_DEV_POWER_USAGE",), 1.0, MAX_W),  # W
    energy=Series(("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",), 1e-3),  # mJ
    sm_active=Series(("DCGM_FI_PROF_SM_ACTIVE",), _RATIO, 1.0),
    tensor_active=Series(("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",), _RATIO, 1.0),
    # the defaults of config.PrometheusLabels, which override them
    labels=Labels(
        host=("Hostname", "hostname"),
        gpu="gpu",
        minor="device",
        minor_prefix="nvidia",
        uuid="UUID",
        model="modelName",
        gpu_instance="GPU_I_ID",
        mig_profile="GPU_I_PROFILE",
    ),
    job=Job("label", labels=("hpc_job",)),
    labels_configurable=True,
)

JOBSTATS = Dialect(
    name="jobstats",
    title="Princeton Jobstats' NVML exporter (nvidia_gpu_prometheus_exporter)",
    util=(
        # GPM (Hopper and newer, MIG instances too): the share of SMs busy, as DCGM's SM_ACTIVE
        UtilSeries(("nvidia_gpu_sm_util_percent",), 1.0, 100.0, column="sm_active"),
        # NVML's utilization, never written for a GPU in MIG mode
        UtilSeries(("nvidia_gpu_duty_cycle",), 1.0, 100.0, column="gpu_util", on_mig=False),
    ),
    mem_used=Series(("nvidia_gpu_memory_used_bytes",), 1.0 / MIB, MAX_MIB * MIB),
    mem_total=Series(("nvidia_gpu_memory_total_bytes",), 1.0 / MIB, MAX_MIB * MIB),
    power=Series(("nvidia_gpu_power_usage_milliwatts",), 1e-3, MAX_W * 1e3),  # mW
    sm_active=Series(("nvidia_gpu_sm_util_percent",), 1.0, 100.0),
    tensor_active=Series(("nvidia_gpu_any_tensor_util_percent",), 1.0, 100.0),
    labels=Labels(
        gpu="ordinal",
        minor="minor_number",
        uuid="uuid",
        model="name",
        gpu_instance="GPU_I_ID",  # a MIG device: its parent's ordinal and minor number
        mig_profile_in_model=True,
    ),
    job=Job(
        "label",
        labels=("jobid",),
        gauge=JobGauge("nvidia_gpu_jobId", on=("minor_number",)),
    ),
    notes=(
        "a GPU in MIG mode has no duty cycle (the exporter's comment: MIG cards cannot report "
        "it); its MIG devices have a utilization only where GPM gives sm_util_percent (Hopper "
        "and newer), else memory and power only",
        "older versions have no GPU_I_ID: their MIG devices, with their parent's ordinal, are "
        "quarantined as second readings of the parent GPU",
    ),
)

SLURM_JOB_EXPORTER = Dialect(
    name="slurm-job-exporter",
    title="slurm-job-exporter",
    util=(UtilSeries(("slurm_job_utilization_gpu",), 1.0, 100.0, column="gpu_util"),),
    mem_used=Series(("slurm_job_memory_usage_gpu",), 1.0 / MIB, MAX_MIB * MIB),
    mem_total=Series(("slurm_job_memory_total_gpu",), 1.0 / MIB, MAX_MIB * MIB),
    power=Series(("slurm_job_power_gpu",), 1e-3, MAX_W * 1e3),  # mW
    tensor_active=Series(("slurm_job_tensor_gpu",), 1.0, 100.0),  # percent (DCGM ratio x 100)
    labels=Labels(gpu="gpu", model="gpu_type"),
    job=Job("label", labels=("slurmjobid",)),
    gpu_is_job_local=True,
    notes=(
        "`gpu` is the index among the job's own GPUs (nvidia-smi run in the job's cgroup), not "
        "the host's: placed on the job's GPUs that Slurm's records name, else on a device of "
        "the job's own (gpu >= 4096, host index unknown: ingest/job_local_gpus.py)",
        "a GPU no job holds has no series: idle unallocated GPUs are not seen",
        "on a MIG GPU `gpu` is the MIG device's uuid, not an index: such series are refused "
        "(no GPU index)",
        "utilization is DCGM's SM_ACTIVE x 100 where DCGM runs, else NVML's GPU utilization",
    ),
)

NVIDIA_SMI = Dialect(
    name="nvidia-smi",
    title="nvidia_gpu_exporter (nvidia-smi)",
    util=(UtilSeries(("nvidia_smi_utilization_gpu_ratio",), _RATIO, 1.0, column="gpu_util"),),
    mem_used=Series(("nvidia_smi_memory_used_bytes",), 1.0 / MIB, MAX_MIB * MIB),
    mem_total=Series(("nvidia_smi_memory_total_bytes",), 1.0 / MIB, MAX_MIB * MIB),
    power=Series(
        ("nvidia_smi_power_draw_average_watts", "nvidia_smi_power_draw_watts"), 1.0, MAX_W
    ),
    energy=Series(("nvidia_smi_energy_joules_total",), 1.0),
    labels=Labels(uuid="uuid"),
    info=InfoSeries("nvidia_smi_gpu_info", on="uuid", gpu="index", model="name"),
    job=Job("none"),
    notes=(
        "utilization is a ratio printed from nvidia-smi's integer percent: exact to 1 %",
        "no job at all: jobs are tied to GPUs by scontrol captures or whole-host allocations",
    ),
)

AMD = Dialect(
    name="amd",
    title="AMD ROCm device-metrics-exporter",
    util=(UtilSeries(("gpu_gfx_activity", "amd_gpu_gfx_activity"), 1.0, 100.0, column="gpu_util"),),
    mem_used=Series(("gpu_used_vram", "amd_gpu_used_vram"), 1.0, MAX_MIB),  # MB (MiB)
    mem_total=Series(("gpu_total_vram", "amd_gpu_total_vram"), 1.0, MAX_MIB),
    power=Series(
        (
            "gpu_package_power",
            "gpu_power_usage",
            "gpu_average_package_power",
            "amd_gpu_package_power",
            "amd_gpu_power_usage",
            "amd_gpu_average_package_power",
        ),
        1.0,
        MAX_W,
    ),
    energy=Series(("gpu_energy_consumed", "amd_gpu_energy_consumed"), 1e-6),  # uJ
    tensor_active=Series(
        ("gpu_prof_tensor_active_percent", "amd_gpu_prof_tensor_active_percent"), 1.0, 100.0
    ),
    labels=Labels(host=("hostname",), gpu="gpu_id", uuid="gpu_uuid", model="card_model"),
    job=Job("label", labels=("job_id",)),
    notes=(
        "GPU_GFX_ACTIVITY is the unpartitioned GPU's: a partitioned GPU's devices are read as "
        "whole GPUs",
        "gpu_id is the exporter's GPU index; no device minor number is given",
    ),
)

# In order of preference where two dialects describe one GPU (the richer first).
DIALECTS: tuple[Dialect, ...] = (DCGM, JOBSTATS, AMD, SLURM_JOB_EXPORTER, NVIDIA_SMI)
BY_NAME: dict[str, Dialect] = {d.name: d for d in DIALECTS}
NAMES: tuple[str, ...] = tuple(BY_NAME)
DEFAULT = DCGM


def dialect(name: str) -> Dialect:
    """The dialect called `name`; ValueError naming the accepted ones otherwise."""
    found = BY_NAME.get(name)
    if found is None:
        raise ValueError(f"unknown telemetry '{name}': expected one of {', '.join(NAMES)}")
    return found


def present(families: set[str] | frozenset[str]) -> list[Dialect]:
    """The dialects whose marker series are among `families`, in order of preference."""
    return [d for d in DIALECTS if any(m in families for m in d.markers())]


def first_present(s: Series, families: set[str] | frozenset[str] | dict[str, object]) -> str | None:
    """The first of `s.names` among `families` (an exporter release uses one of them)."""
    return next((n for n in s.names if n in families), None)
