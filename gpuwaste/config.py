"""Configuration: one TOML file (`gpuwaste.toml`), validated by pydantic.

The file is found from `--config`, else `$GPUWASTE_CONFIG`, else `./gpuwaste.toml` when it exists;
with none, every default applies and sources come from command-line flags alone.

Secrets never live here: a source names the *environment variable* that holds its token or
password (`token_env`, `password_env`), and `secrets.py` reads it at the moment of use.

Every **choice** of docs/definitions.md is a field of `Thresholds`, with the study's default.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from gpuwaste.dialects import dialect
from gpuwaste.errors import GpuwasteError
from gpuwaste.text import printable

DEFAULT_DATA_DIR = Path("gpuwaste-data")
CONFIG_ENV = "GPUWASTE_CONFIG"
DATA_DIR_ENV = "GPUWASTE_DATA_DIR"
CLUSTER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")

PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
NonNegFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Share = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
Percent = Annotated[float, Field(ge=0, le=100, allow_inf_nan=False)]


class ConfigError(GpuwasteError):
    """A configuration problem, phrased as one sentence for the operator."""


def check_cluster_name(name: str) -> str:
    """A cluster name is also a folder name (`cluster=<name>`): no path separators, no dots
    first."""
    if not CLUSTER_NAME.fullmatch(name):
        raise ValueError(
            "expected letters, digits, '_', '.' or '-', starting with a letter or a digit"
        )
    return name


def check_timezone(zone: str) -> str:
    from zoneinfo import ZoneInfo

    try:
        ZoneInfo(zone)
    except Exception:  # ZoneInfoNotFoundError, ValueError (e.g. a path)
        raise ValueError("expected an IANA time zone such as UTC or Europe/Paris") from None
    return zone


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Thresholds(_Strict):
    """The studies' parameters; each default is the one docs/definitions.md gives."""

    # Basic quantities [ICSE24 §3.2]: a gap longer than this many sampling intervals is no data.
    missing_gap_intervals: PositiveFloat = 3.0
    # The sampling interval those gaps are counted in: None = the median spacing of each job x
    # GPU's own samples; a job x GPU with fewer than two samples uses `fallback_interval_s`.
    sampling_interval_s: PositiveFloat | None = None
    fallback_interval_s: PositiveFloat = 30.0
    # Spatial underutilization [CloudBrain §IV-A/B].
    low_share_pct: Percent = 50.0
    very_low_pct: Percent = 20.0
    mismatch_high_pct: Percent = 80.0
    mismatch_low_pct: Percent = 20.0
    fluctuation_window_s: PositiveFloat = 120.0
    fluctuation_range_pct: Percent = 90.0
    fluctuation_job_share: Share = 0.75
    # Stable phases [CloudBrain §IV-B, Table III].
    phase_tolerance_mib: PositiveFloat = 512.0
    stable_phase_lengths_s: list[PositiveFloat] = Field(
        default_factory=lambda: [60.0, 120.0, 240.0, 480.0, 960.0]
    )
    stable_phase_idle_gib: list[PositiveFloat] = Field(default_factory=lambda: [1.0, 2.0, 4.0, 8.0])
    # Idle slots and never-used GPUs [CloudBrain §IV-C].
    idle_slot_min_s: PositiveFloat = 60.0
    idle_mem_floor_mib: NonNegFloat = 0.0
    # Debugging jobs [CloudBrain §IV-C1, ICSE24 §4.1].
    infer_debug_idle_share: Share = 0.5
    infer_debug_min_slots: Annotated[int, Field(ge=1)] = 3
    debug_max_duration_h: PositiveFloat = 8.0
    # A job "reaches" the limit when it ran at least limit - this tolerance (or ended in TIMEOUT).
    debug_limit_tolerance_s: NonNegFloat = 0.0
    debug_unused_share: Share = 0.8
    # Telemetry-visible causes [ICSE24 Table 1].
    low_util_pct: Percent = 50.0
    # Looks busy (#44, docs/definitions.md#looks-busy): the coarse busy metric (GPU_UTIL) at or
    # above busy_coarse_min_pct while SM/tensor activity is at or under busy_fine_max_pct or, on
    # samples without SM/tensor activity, power is at or under busy_power_max_idle_x times the
    # model's idle power (the idle_power analysis), in more than looks_busy_share of the job's
    # samples that carry the coarse metric.
    busy_coarse_min_pct: Percent = 90.0
    busy_fine_max_pct: Percent = 5.0
    busy_power_max_idle_x: PositiveFloat = 4.0
    looks_busy_share: Share = 0.5
    batch_mem_peak_pct: Percent = 50.0
    insufficient_mem_peak_pct: Percent = 80.0
    unreleased_min_s: PositiveFloat = 600.0
    slow_start_min_s: PositiveFloat = 600.0
    checkpoint_min_dips: Annotated[int, Field(ge=2)] = 3
    checkpoint_spacing_tolerance: Share = 0.2
    # A job observed for less than this share of its allocation is flagged, not judged.
    min_observed_share: Share = 0.5


class PrometheusLabels(_Strict):
    """Label names of the DCGM exporter series, with the variants seen in the wild."""

    host: list[str] = Field(default_factory=lambda: ["Hostname", "hostname"])
    gpu: str = "gpu"
    uuid: str = "UUID"
    job: str = "hpc_job"
    pod: list[str] = Field(default_factory=lambda: ["pod", "exported_pod", "pod_name"])
    namespace: list[str] = Field(
        default_factory=lambda: ["namespace", "exported_namespace", "pod_namespace"]
    )
    node_instance: str = "instance"
    gpu_instance: str = "GPU_I_ID"  # MIG: the GPU instance of a series (with `gpu`, its parent)
    mig_profile: str = "GPU_I_PROFILE"  # MIG: the instance's profile, e.g. 1g.10gb
    model: str = "modelName"  # the GPU model, e.g. NVIDIA A100-SXM4-80GB


class KubernetesJobs(_Strict):
    """Jobs from kube-state-metrics in the same Prometheus."""

    enabled: bool = False
    gpu_resource: str = "nvidia_com_gpu"
    vc_label: str | None = None  # a pod label (e.g. a queue); default: the namespace
    debug_label: str | None = None  # a pod label whose presence/truthy value marks a notebook
    debug_namespaces: list[str] = Field(default_factory=list)


class PrometheusSource(_Strict):
    url: str
    label_filter: str = ""  # e.g. '{cluster="a"}' or 'cluster="a"'
    token_env: str | None = None  # name of the env var holding a bearer token
    username_env: str | None = None
    password_env: str | None = None
    verify_tls: bool = True
    timeout_s: PositiveFloat = 30.0
    retries: Annotated[int, Field(ge=0, le=10)] = 3
    scrape_interval_s: PositiveFloat = 15.0
    max_points_per_query: Annotated[int, Field(ge=100, le=11000)] = 11000
    labels: PrometheusLabels = Field(default_factory=PrometheusLabels)
    kubernetes: KubernetesJobs = Field(default_factory=KubernetesJobs)
    jobs_from_labels: bool = True

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError("expected an http:// or https:// URL")
        return v.rstrip("/")


class SlurmSource(_Strict):
    file: Path | None = None
    command: list[str] | None = None  # e.g. ["sacct", "--parsable2", "--allocations", ...]
    # `scontrol show job -d` output: a file, or a folder of captures (every file in it)
    scontrol_file: Path | None = None
    # run at every `ingest slurm` to capture the running jobs' GPU indices, e.g.
    # ["scontrol", "show", "job", "-d"]; each capture is kept under data_dir/captures/
    scontrol_command: list[str] | None = None
    # how long a capture (and the device numbers read from it) waits for its jobs' GPUs
    scontrol_keep_days: PositiveFloat = 7.0
    # what Slurm's IDX is where the telemetry names no minor number: "minor" (wait for one) or
    # "index" (the NVML index: say so only where gres.conf numbers GPUs that way)
    gres_idx: Literal["minor", "index"] = "minor"
    vc_from: Literal["partition", "account"] = "account"
    debug_partitions: list[str] = Field(default_factory=lambda: ["debug", "interactive"])
    debug_qos: list[str] = Field(default_factory=list)
    debug_name_pattern: str = r"^(_?interactive|bash|sh|zsh|jupyter.*|sys/dashboard.*)$"
    # For output without a header line (`sacct -n`): its columns; default: the command's --format.
    columns: list[str] | None = None
    delimiter: str | None = None  # default: detected (`|`, `;|;`, `^|^`)
    command_timeout_s: PositiveFloat = 300.0
    first_window_days: PositiveFloat = 7.0  # how far back the first `command` run reaches


class PhillySource(_Strict):
    dir: Path
    timezone: str = "America/Los_Angeles"

    @field_validator("timezone")
    @classmethod
    def _tz(cls, v: str) -> str:
        return check_timezone(v)


class LogsSource(_Strict):
    """Job stdout/stderr files (`[clusters.logs]`, `gpuwaste ingest logs`): docs/ingest-files.md."""

    dir: Path
    # file name -> job: a regex with the group `job` (the job id as the scheduler shows it:
    # `123`, `123_4` for an array task) and optionally `attempt`; the default takes Slurm's own
    # default names, slurm-%j.out and slurm-%A_%a.out (and .err)
    pattern: str = r"^slurm-(?P<job>\d+(?:_\d+)?)(?:\.(?P<attempt>\d+))?\.(?:out|err)$"
    tail_mib: PositiveFloat = 4.0  # a larger file is read from its last tail_mib MiB

    @field_validator("pattern")
    @classmethod
    def _pattern(cls, v: str) -> str:
        try:
            compiled = re.compile(v)
        except re.error as exc:
            raise ValueError(f"not a regular expression ({exc})") from None
        if "job" not in compiled.groupindex:
            raise ValueError("the pattern needs a named group `job`, as in (?P<job>\\d+)")
        import polars as pl  # deferred: reading a configuration needs no polars otherwise

        try:  # the stored rows' names are matched again by polars (logs.source.renamed_attempts)
            pl.Series([""], dtype=pl.String).str.extract_groups(v)
        except pl.exceptions.ComputeError:
            raise ValueError(
                "a regular expression of a form polars' engine does not accept (look-around, "
                "backreferences); write it without them"
            ) from None
        return v


class OpenMetricsSource(_Strict):
    file: Path
    # the host of a scrape whose series carry no host label (one host's /metrics saved to a file)
    host: str | None = None


def check_telemetry(name: str | None) -> str | None:
    """A telemetry dialect's name (gpuwaste.dialects), or None (recognised from the series)."""
    if name is not None:
        dialect(name)  # ValueError naming the accepted ones
    return name


class CsvSource(_Strict):
    samples: Path | None = None
    jobs: Path | None = None
    mapping: Path


class ClusterConfig(_Strict):
    name: str
    timezone: str = "UTC"
    prometheus: PrometheusSource | None = None
    slurm: SlurmSource | None = None
    philly: PhillySource | None = None
    openmetrics: OpenMetricsSource | None = None
    csv: CsvSource | None = None
    parquet: CsvSource | None = None
    logs: LogsSource | None = None
    # GPU model by host glob (`"gpu-a100-*" = "NVIDIA A100-SXM4-80GB"`), for devices whose samples
    # carry no DCGM modelName; the first matching pattern wins
    gpu_models: dict[str, str] = Field(default_factory=dict)
    # the GPU telemetry dialect of its Prometheus / OpenMetrics series (gpuwaste.dialects.NAMES);
    # None: recognised from the series present
    telemetry: str | None = None
    # GPUs per virtual cluster (`[clusters.vc_quotas]`, `research = 64`): a job's wait while its
    # VC held its quota is fair-share delay (docs/definitions.md#queueing-causes); without
    # quotas fair-share is not judged
    vc_quotas: dict[str, PositiveFloat] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return check_cluster_name(v)

    @field_validator("telemetry")
    @classmethod
    def _telemetry(cls, v: str | None) -> str | None:
        return check_telemetry(v)

    @field_validator("timezone")
    @classmethod
    def _tz(cls, v: str) -> str:
        return check_timezone(v)


class FileLimits(_Strict):
    """Bounds on one input file of the file sources (`[files]`): past them the file is refused
    in one sentence and nothing is written (a gzip bomb, a wrong file)."""

    max_size_gib: PositiveFloat = 64.0  # a file's text (a .gz: once decompressed)
    max_gzip_ratio: PositiveFloat = 200.0  # a .gz's text / its size on disk
    # a file that a source reads whole (sacct, scontrol, the Philly job log, a generic jobs
    # file): a sacct file takes about 20 times its size in memory while it is parsed
    max_read_whole_mib: PositiveFloat = 64.0


class ExporterSettings(_Strict):
    """`gpuwaste exporter`: the Prometheus exporter (docs/exporter.md)."""

    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=1, le=65535)] = 9815
    cache_seconds: NonNegFloat = 60.0  # the figures are computed at most once per this
    top_jobs: Annotated[int, Field(ge=0, le=10_000)] = 50  # idle running jobs with own series
    # a scraper's request must arrive, and its answer leave, within this; else it is closed
    idle_timeout_s: PositiveFloat = 10.0
    # How often `gpuwaste ingest` and `gpuwaste analyze` are scheduled: the staleness alerts fire
    # after 3 of these (exported as gpuwaste_update_interval_seconds).
    update_interval_s: PositiveFloat = 300.0


class SqlSettings(_Strict):
    """`[sql]`: the bounds of one read-only query, `gpuwaste sql` and the dashboard's SQL page
    (docs/reliability.md); each hit is one sentence naming the key."""

    memory_mib: Annotated[int, Field(ge=64)] = 2048  # memory one query may take
    timeout_s: PositiveFloat = 300.0  # `gpuwaste sql` (--timeout)
    page_timeout_s: PositiveFloat = 30.0  # the dashboard's SQL page


class NotifyConfig(_Strict):
    """`[notify]`: who gets a digest of their wasted GPU time, and how (docs/act.md)."""

    since: str = "7d"  # the window: this long before `until` (default: today 00:00 UTC)
    min_wasted_gpu_hours: NonNegFloat = 1.0  # idle-slot + never-used GPU hours in the window
    min_waste_share: Share = 0.2  # ... and this share of the user's GPU time
    max_jobs_listed: Annotated[int, Field(ge=1, le=100)] = 5
    address_template: str | None = None  # e.g. "{user}@example.org"
    address_file: Path | None = None  # CSV with a header `user,address`
    opt_out: list[str] = Field(default_factory=list)  # users (or addresses) never written to
    vc_owners: dict[str, list[str]] = Field(default_factory=dict)  # VC -> owners' addresses
    smtp: str | None = None  # smtp://HOST:PORT
    smtp_user: str | None = None  # the login user (or USER@ in the smtp URL; not both differing)
    smtp_password_env: str | None = None  # name of the env var holding the SMTP password
    sender: str | None = None
    webhook_env: str | None = None  # name of the env var holding a Slack/Mattermost webhook URL
    rate_limit_messages: Annotated[int, Field(ge=1)] = 2  # per recipient and channel ...
    rate_limit_hours: PositiveFloat = 24.0  # ... in this many hours
    dashboard_url: str = "http://127.0.0.1:8501"  # links to the Job page: <url>/job?job=ID


class CostSettings(_Strict):
    """`[cost]`: what a GPU-hour costs, by GPU model. A MIG instance costs its slice's share."""

    currency: str = "USD"
    # GPU model glob -> price of one whole-GPU hour (`"*A100*" = 2.5`); the first match wins
    gpu_hour: dict[str, float] = Field(default_factory=dict)

    @field_validator("gpu_hour")
    @classmethod
    def _prices(cls, v: dict[str, float]) -> dict[str, float]:
        for model, price in v.items():
            if not (price >= 0 and price != float("inf")):
                raise ValueError(f"[cost.gpu_hour] '{model}' = {price}: a price must be 0 or more")
        return v


class EnergyFactors(_Strict):
    """What turns the GPUs' kWh into the facility's, its emissions and its money."""

    # grams of CO2e per kWh of the site's electricity: no default (grids differ from ~20 to
    # ~800 g/kWh), so kg CO2e is null until it is set
    co2_g_per_kwh: NonNegFloat | None = None
    # power usage effectiveness, facility energy / IT energy; 1.0 counts the GPUs' own energy
    # only (no cooling or conversion overhead assumed)
    pue: float = Field(default=1.0, ge=1.0)
    price_per_kwh: NonNegFloat | None = None  # in [cost] currency; null: no money for energy


class EnergySettings(EnergyFactors):
    """`[energy]`: the site's factors, and `[energy.clusters.NAME]` a cluster's own (a cluster
    on another site's grid); a cluster's table replaces the site's factors it sets."""

    clusters: dict[str, EnergyFactors] = Field(default_factory=dict)

    def factors(self, cluster: str) -> EnergyFactors:
        own = self.clusters.get(cluster)
        site = EnergyFactors(co2_g_per_kwh=self.co2_g_per_kwh, pue=self.pue,
                             price_per_kwh=self.price_per_kwh)  # fmt: skip
        if own is None:
            return site
        return site.model_copy(update=own.model_dump(exclude_unset=True))


class IngestSettings(_Strict):
    """`[ingest]`: the times every source believes (docs/ingest-files.md#times-no-source-believes).

    A sample or job time later than the ingest run plus `future_tolerance_s` is a clock that is
    ahead (one such sample once made every running job of its cluster end in the year 2200), one
    before `earliest_time` a clock that was reset (a dead RTC battery restarts at 1970 or 2000):
    both are quarantined, never stored."""

    future_tolerance_s: NonNegFloat = 600.0
    # Before any telemetry gpuwaste reads (the Philly trace, the oldest, is from 2017), after
    # the dates a reset clock shows (1970-01-01, 2000-01-01).
    earliest_time: datetime = datetime(2010, 1, 1, tzinfo=UTC)

    @field_validator("earliest_time")
    @classmethod
    def _earliest(cls, v: datetime) -> datetime:
        v = v.replace(tzinfo=UTC) if v.tzinfo is None else v.astimezone(UTC)  # TOML: no zone
        if v > datetime.now(UTC):
            raise ValueError("expected a time in the past (every later time would be refused)")
        return v


FailureSource = Literal["IF", "AE", "U"]  # infrastructure, AI engine, user [Philly Table 7]


class FailureRule(_Strict):
    """A failure signature (`[[failures.rules]]`): a regex over a job's log lines, its reason and
    the reason's sources. `implicit`: a symptom (a Python traceback) that names no root cause,
    matched only when no root-cause rule matches."""

    regex: str
    reason: str
    sources: list[FailureSource] = Field(default_factory=list)
    implicit: bool = False

    @model_validator(mode="after")
    def _regex(self) -> FailureRule:
        try:
            re.compile(self.regex)
        except re.error as exc:
            raise ValueError(
                f"the rule of reason '{self.reason}' has a regex that is not a regular "
                f"expression ({exc}): {self.regex!r}"
            ) from None
        return self


class FailureSettings(_Strict):
    """`[failures]`: the signature rules (configured rules before the shipped ones, unless
    `default_rules = false`) and who counts as an admin in `CANCELLED by <uid>`."""

    rules: list[FailureRule] = Field(default_factory=list)
    default_rules: bool = True
    admin_uids: list[int] = Field(default_factory=lambda: [0])  # root; add SlurmUser's uid


class Settings(_Strict):
    data_dir: Path = DEFAULT_DATA_DIR
    clusters: list[ClusterConfig] = Field(default_factory=list)
    thresholds: Thresholds = Field(default_factory=Thresholds)
    exporter: ExporterSettings = Field(default_factory=ExporterSettings)
    sql: SqlSettings = Field(default_factory=SqlSettings)
    notify: NotifyConfig = Field(default_factory=NotifyConfig)
    cost: CostSettings = Field(default_factory=CostSettings)
    energy: EnergySettings = Field(default_factory=EnergySettings)
    ingest: IngestSettings = Field(default_factory=IngestSettings)
    files: FileLimits = Field(default_factory=FileLimits)
    failures: FailureSettings = Field(default_factory=FailureSettings)
    source_path: Path | None = Field(default=None, exclude=True)

    def cluster(self, name: str) -> ClusterConfig:
        for c in self.clusters:
            if c.name == name:
                return c
        known = ", ".join(c.name for c in self.clusters) or "none"
        where = self.source_path or "the configuration"
        raise ConfigError(f"no cluster named '{name}' in {where} (configured: {known}).")


def error_reason(err: Mapping[str, Any]) -> str:
    """What a pydantic error says is expected, as the middle of a sentence."""
    msg = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
    return printable(msg[0].lower() + msg[1:] if msg else msg)


def error_input(err: Mapping[str, Any]) -> str:
    """The value a pydantic error refused, quoted and shortened for a message."""
    given = err.get("input")
    shown = repr(given) if not isinstance(given, dict | list) else type(given).__name__
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return printable(shown)


def _describe(err: Mapping[str, Any]) -> str:
    loc = printable(".".join(str(p) for p in err.get("loc", ())))
    kind = err.get("type", "")
    if kind == "extra_forbidden":
        return f"unknown key '{loc}'"
    if kind == "missing":
        return f"missing required key '{loc}'"
    if kind == "value_error" and isinstance(err.get("input"), dict | list):
        # a whole table's validator (a failure rule's regex) names what it refused in its own
        # sentence; the table's type name after it would add only "got dict"
        return f"key '{loc}': {error_reason(err)}"
    return f"key '{loc}': {error_reason(err)}, got {error_input(err)}"


def parse_settings(data: dict[str, Any], source: Path | str = "<config>") -> Settings:
    """Validate a parsed TOML document; errors become one ConfigError naming key and file."""
    try:
        settings = Settings.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        first = _describe(errors[0])
        more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
        raise ConfigError(f"{source}: {first}{more}.") from None
    names = [c.name for c in settings.clusters]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"{source}: key 'clusters': cluster name '{dupes[0]}' appears twice.")
    return settings.model_copy(update={"source_path": Path(source)})


def load_settings(path: Path | None = None, data_dir: Path | None = None) -> Settings:
    """Load the configuration file (if any) and apply a `--data-dir` override."""
    if path is None and os.environ.get(CONFIG_ENV):
        path = Path(os.environ[CONFIG_ENV])
    if path is None and Path("gpuwaste.toml").is_file():
        path = Path("gpuwaste.toml")
    if path is None:
        settings = Settings()
    else:
        if not path.is_file():
            raise ConfigError(f"configuration file {path} does not exist.")
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: not valid TOML ({exc}).") from None
        settings = parse_settings(data, path)
        if not settings.data_dir.is_absolute():
            # A relative data_dir is relative to the file that names it.
            settings = settings.model_copy(update={"data_dir": path.parent / settings.data_dir})
    if data_dir is None and os.environ.get(DATA_DIR_ENV):
        data_dir = Path(os.environ[DATA_DIR_ENV])
    if data_dir is not None:
        settings = settings.model_copy(update={"data_dir": data_dir})
    return settings
