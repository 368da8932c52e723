"""Series of GPU telemetry and node-exporter metrics -> `gpu_samples` / `host_samples` rows (pure).

Shared by the Prometheus source (JSON answers) and the `openmetrics` file source (text), so both
give identical rows for identical series.

GPU series are read through a telemetry dialect's declaration (`gpuwaste.dialects`; DCGM by
default, described below): its series, scales, maxima and labels. Another dialect's utilization
series are its own (no MIG rule unless declared: `UtilSeries.on_mig`); its index may come from an
info series joined on the uuid (nvidia-smi) and its job from a companion gauge whose value is the
job, joined on (host, device minor number, time) (older Jobstats). `gpu_minor` is the device
minor number where the dialect names it (DCGM `device="nvidiaN"`, Jobstats `minor_number`).

GPU rows. One row per (host, gpu, gpu_instance, job_id, ts); several jobs on one GPU repeat the
series (DCGM `hpc_job`), so `job_id` is part of the key. A MIG instance (labels `GPU_I_ID` and
`GPU_I_PROFILE` beside its parent's `gpu`) is a device of its own: `gpu_instance` is its id and
`mig_profile` its profile, and it is never merged into the parent GPU's series. Utilization comes
from the best metric present *for that series*, in the order of `UTIL_METRICS`, except that a
MIG instance never takes `DCGM_FI_DEV_GPU_UTIL` (it reads 0 on MIG, dcgm-exporter#216): only
SM_ACTIVE, then GR_ENGINE_ACTIVE. The ratios (`DCGM_FI_PROF_*`, 0-1) are scaled to 0-100 and
`util_source` names the metric used. `gpu_model` is the `modelName` label. `sm_active` and
`tensor_active` are percent (0-100), `power_w` watts. Memory total is used + free + reserved (reserved counts as 0 when not exported).

Label variants: host from the first of `labels.host` present (`Hostname`, `hostname`), else the
`instance` label without its port. job from `labels.job` (`hpc_job`), else the pod: a ServiceMonitor
renames the workload's `pod` to `exported_pod` when the exporter's own `pod` label is attached,
so `exported_*` wins when present; a pod whose name starts with the scrape `job` label (e.g.
`dcgm-exporter-zxgzh` under `job="dcgm-exporter"`) is the exporter itself, not a workload. A pod is
named `namespace/pod` when a namespace label is present, as in the `jobs` table of Kubernetes.
Empty label values count as absent.

Refused, with a reason, never written: a series without host or GPU index; a MIG instance
without its profile, with a profile that is not one, or one that its model does not have
(`gpuwaste/warehouse/mig.py`), or a profile without an instance id; a value that is not a
number, NaN, infinite, negative, or above the metric's range (e.g. DCGM's int64 "not supported"
sentinel 9223372036854775794); samples at a time no source believes (`ingest.times`: from the
future, from before `[ingest] earliest_time`), one record per series naming its host; a second
reading of one GPU at one instant with other values (the first is kept).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

import polars as pl

from gpuwaste.config import PrometheusLabels
from gpuwaste.dialects import (
    DCGM,
    DIALECTS,
    MAX_W,
    SLURM_JOB_EXPORTER,
    Dialect,
    Series,
    power_limit_w,
)
from gpuwaste.ingest.prometheus.parse import SeriesSet
from gpuwaste.ingest.times import (
    TimeBounds,
    conflicting_duplicates,
    duplicate_reason,
    refuse_duplicates,
    with_host,
)
from gpuwaste.warehouse.bookkeeping import Refused
from gpuwaste.warehouse.mig import MAX_INSTANCE_ID, profile_problem
from gpuwaste.warehouse.schema import GPU_SAMPLES, HOST_SAMPLES, UTC_TS, conform


def _name(s: Series | None) -> str:
    assert s is not None
    return s.name


# DCGM's series, named by its declaration (gpuwaste.dialects.DCGM)
SM_ACTIVE = DCGM.util[0].name
GR_ACTIVE = DCGM.util[1].name
GPU_UTIL = DCGM.util[2].name
FB_USED = DCGM.mem_used.name
COARSE_UTIL = (
    "gpu_util"  # the utilization column kept as gpu_samples.gpu_util (dialects.UtilSeries)
)
FB_FREE = _name(DCGM.mem_free)
FB_RESERVED = _name(DCGM.mem_reserved)
TENSOR_ACTIVE = _name(DCGM.tensor_active)
POWER = _name(DCGM.power)
UTIL_METRICS = (SM_ACTIVE, GR_ACTIVE, GPU_UTIL)
GPU_METRICS = DCGM.families()
# every dialect's series: what a source asks for or stages before it knows the dialect
ALL_GPU_METRICS = tuple(dict.fromkeys(n for d in DIALECTS for n in d.families()))

NODE_CPU = "node_cpu_seconds_total"
NODE_MEM_AVAILABLE = "node_memory_MemAvailable_bytes"
NODE_MEM_TOTAL = "node_memory_MemTotal_bytes"
HOST_METRICS = (NODE_CPU, NODE_MEM_AVAILABLE, NODE_MEM_TOTAL)
IDLE_MODES = ("idle", "iowait")

# metric-name prefix -> (what such series are, what gpuwaste does instead)
_OTHER_SERIES = {
    "slurm_job_": (
        "a per-Slurm-job exporter's series",
        ", and takes jobs from sacct; slurm-job-exporter's GPU series "
        f"({', '.join(SLURM_JOB_EXPORTER.markers())}) are read where a scrape has them "
        "(recognised, or with `--telemetry slurm-job-exporter`), and this one has none",
    ),
    "kube_": ("kube-state-metrics series", ", and kube-state-metrics pods only alongside those"),
}


def none_read(families: list[str], *, at_least: bool = False) -> str:
    """What these metric names are (sorted, none of them a dialect's marker or in HOST_METRICS)
    and what gpuwaste reads instead: the end of a sentence saying why nothing was kept.
    `at_least`: `families` are only the first names of more."""
    more = len(families) - 3
    shown = ", ".join(families[:3]) + (
        f" and {'at least ' if at_least else ''}{more} more" if more > 0 else ""
    )
    n = f"{'at least ' if at_least else ''}{len(families)} metric famil"
    n += f"{'y' if len(families) == 1 else 'ies'}: {shown}"
    others = ", ".join(d.name for d in DIALECTS[1:])
    needs = (
        f"gpuwaste reads per-GPU DCGM exporter series ({', '.join(UTIL_METRICS)}, {FB_USED}) "
        f"or another telemetry dialect's ({others}: docs/ingest-prometheus.md) "
        f"and node exporter series ({', '.join(HOST_METRICS)})"
    )
    for prefix, (what, instead) in _OTHER_SERIES.items():
        if all(f.startswith(prefix) for f in families):
            return f"{what} ({n}): {needs}{instead}"
    return f"none of the series gpuwaste reads ({n}): {needs}"


_RATIO_SLACK = 1e-6  # DCGM ratios are printed with six decimals; 1.000001 is still 100 %


@dataclass(frozen=True)
class Rows:
    """Rows for one table and the records refused on the way."""

    frame: pl.DataFrame
    refused: list[Refused]


def _present(labels: Mapping[str, str], name: str) -> str | None:
    value = labels.get(name)
    return value if value else None


def host_of(labels: Mapping[str, str], cfg: PrometheusLabels) -> str | None:
    for name in (*cfg.host, "nodename"):
        value = _present(labels, name)
        if value:
            return value
    instance = _present(labels, cfg.node_instance)
    if instance is None:
        return None
    if instance.startswith("["):  # [ipv6]:port
        return instance.split("]", 1)[0] + "]"
    return instance.rsplit(":", 1)[0] if instance.count(":") == 1 else instance


def job_of(labels: Mapping[str, str], cfg: PrometheusLabels) -> str | None:
    """`hpc_job`, else the workload pod as `namespace/pod` (see the module docstring)."""
    job = _present(labels, cfg.job)
    if job:
        return job
    pod_names = sorted(cfg.pod, key=lambda n: not n.startswith("exported_"))
    ns_names = sorted(cfg.namespace, key=lambda n: not n.startswith("exported_"))
    for name in pod_names:
        pod = _present(labels, name)
        if pod is None:
            continue
        scrape_job = _present(labels, "job")
        if not name.startswith("exported_") and scrape_job and pod.startswith(scrape_job):
            continue  # the exporter's own pod
        exported = name.startswith("exported_")
        ns = next(
            (
                _present(labels, n)
                for n in ns_names
                if n.startswith("exported_") == exported and _present(labels, n)
            ),
            None,
        )
        return f"{ns}/{pod}" if ns else pod
    return None


def describe(metric: str, labels: Mapping[str, str]) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "__name__")
    return f"{metric}{{{inner}}}"


def _no_refusals(samples: pl.DataFrame) -> pl.DataFrame:
    """The empty frame of refused samples: `samples`' columns and a `reason`."""
    return samples.clear().with_columns(pl.lit(None, dtype=pl.String).alias("reason"))


def _split_by_reason(
    samples: pl.DataFrame, marked: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(good, bad) of `marked` (the samples with a `reason`, null where fine); `samples` as they
    were when none is refused."""
    bad = marked.filter(pl.col("reason").is_not_null())
    if bad.height == 0:
        return samples, bad
    return marked.filter(pl.col("reason").is_null()).drop("reason"), bad


def _bad_value_rows(
    samples: pl.DataFrame, maximum: float, slack: float
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Split samples into (good, bad with a `reason` column)."""
    v = pl.col("value")
    fine = v.is_not_null() & v.is_finite() & (v >= 0) & (v <= maximum + slack)
    if samples.select(fine.all()).item():
        return samples, _no_refusals(samples)
    reason = (
        pl.when(v.is_null())
        .then(pl.lit("not a number"))
        .when(v.is_nan())
        .then(pl.lit("NaN"))
        .when(v.is_infinite())
        .then(pl.lit("infinite"))
        .when(v < 0)
        .then(pl.lit("negative"))
        .when(v > maximum + slack)
        .then(pl.lit(f"above range: more than {maximum:g}"))
        .otherwise(pl.lit(None, dtype=pl.String))
        .alias("reason")
    )
    return _split_by_reason(samples, samples.with_columns(reason))


def _drawable_w(models: Mapping[int, str | None]) -> pl.Expr:
    """Per sample (by `gid`), the most power its device can draw: twice its model's board power
    limit (`power_limit_w`) where the model is known and in the table, else `MAX_W`."""
    limits = {g: 2 * w for g, m in models.items() if (w := power_limit_w(m)) is not None}
    if not limits:
        return pl.lit(MAX_W)
    return pl.col("gid").replace_strict(limits, default=MAX_W, return_dtype=pl.Float64)


def counter_backwards(
    samples: pl.DataFrame, scale: float, models: Mapping[int, str | None]
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Split an energy counter's samples (gid, ts, value; raw units, `scale` to J) into (good,
    bad with a `reason`): a reading below the previous one of its series is a reset (a reboot:
    kept, the analyses count from the new value) when it is no more than the energy the GPU can
    draw since that reading (twice its model's power limit, else `MAX_W`, x the seconds
    between), else the counter ran backwards. Only readings of one file or query window are
    compared: analyses/energy.py bounds every increase again, across windows too."""
    if samples.height < 2:
        return samples, _no_refusals(samples)
    ordered = samples.sort("gid", "ts")
    v = pl.col("value")
    before = v.shift(1).over("gid")
    seconds = (pl.col("ts") - pl.col("ts").shift(1).over("gid")).dt.total_microseconds() / 1e6
    drawable = _drawable_w(models)
    backwards = (v < before) & (v * scale > drawable * seconds)
    reason = (
        pl.when(backwards.fill_null(False))
        .then(
            pl.format("ran backwards without a reset (above {} W since the last reading)", drawable)
        )
        .otherwise(pl.lit(None, dtype=pl.String))
        .alias("reason")
    )
    return _split_by_reason(samples, ordered.with_columns(reason))


def above_model_limit(
    samples: pl.DataFrame, scale: float, models: Mapping[int, str | None]
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Split power samples (gid, value; raw units, `scale` to W) into (good, bad with a
    `reason`): above twice the board power limit of the device's model (`power_limit_w`), where
    the model is known and in the table; the dialect's own maximum is checked before."""
    limits = {g: power_limit_w(m) for g, m in models.items()}
    limits = {g: w for g, w in limits.items() if w is not None}
    if not limits or not samples.height:
        return samples, _no_refusals(samples)
    limit = pl.col("gid").replace_strict(limits, default=None, return_dtype=pl.Float64)
    over = (pl.col("value") * scale > 2 * limit).fill_null(False)
    bad = samples.filter(over).with_columns(
        pl.format("above twice its model's power limit ({} W)", limit).alias("reason")
    )
    return samples.filter(~over), bad


def _refuse_samples(
    bad: pl.DataFrame, metric: str, labels: list[dict[str, str]], source: str
) -> list[Refused]:
    out = []
    rows = bad.select("sid", "ts", "value", "text", "reason").iter_rows()
    for sid, ts, value, text, reason in rows:
        where = f"{source}: {describe(metric, labels[sid])} at {ts.isoformat()}"
        out.append(Refused(where, f"{reason}: {metric}", text if text is not None else _fmt(value)))
    return out


def _believed(
    samples: pl.DataFrame,
    times: TimeBounds,
    metric: str,
    labels: list[dict[str, str]],
    cfg: PrometheusLabels,
    source: str,
    refused: list[Refused],
) -> pl.DataFrame:
    """The samples at times `times` believes; the others refused, one record per series and
    reason, naming the host (a node whose clock is wrong sends every sample of its series)."""
    good, bad = times.split(samples)
    if bad.height == 0:
        return good
    per_series = bad.group_by("sid", "reason", maintain_order=True).agg(
        pl.col("ts").min().alias("first"),
        pl.col("ts").max().alias("last"),
        pl.len().alias("n"),
        pl.col("value").first().alias("value"),
    )
    for sid, reason, first, last, n, value in per_series.iter_rows():
        host = host_of(labels[sid], cfg) or "(no host label)"
        refused.append(
            Refused(
                f"{source}: {describe(metric, labels[sid])}",
                with_host(reason, host, first, last, n),
                f"{describe(metric, labels[sid])} {_fmt(value)} {first.timestamp():.3f}",
            )
        )
    return good


def _refuse_repeats(
    others: pl.DataFrame, metric: str, labels: list[dict[str, str]], source: str
) -> list[Refused]:
    """A record per reading of a series at a time it already had with another value."""
    return [
        Refused(
            f"{source}: {describe(metric, labels[sid])} at {ts.isoformat()}",
            duplicate_reason(),
            _fmt(v),
        )
        for sid, ts, v in others.select("sid", "ts", "value").iter_rows()
    ]


def _fmt(value: float | None) -> str:
    """A value as Prometheus writes it (for quarantine when the raw text was not kept)."""
    if value is None:
        return ""
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    return f"{value:.17g}"


def device_of(labels: Mapping[str, str], cfg: PrometheusLabels) -> tuple[int | None, str | None]:
    """(MIG instance id, profile) of a series: (None, None) for a whole GPU. Raises ValueError
    with the reason when the MIG labels are unusable (the series is refused, never merged into
    its parent GPU)."""
    instance_text = _present(labels, cfg.gpu_instance)
    profile = _present(labels, cfg.mig_profile)
    if instance_text is None:
        if profile is not None:
            raise ValueError(f"a MIG profile without its instance id ({cfg.gpu_instance})")
        return None, None
    try:
        instance = int(instance_text)
    except ValueError:
        raise ValueError(f"MIG instance id '{instance_text}' is not a number") from None
    if not 0 <= instance <= MAX_INSTANCE_ID:
        raise ValueError(f"MIG instance id {instance} is out of range (0-{MAX_INSTANCE_ID})")
    problem = profile_problem(profile, _present(labels, cfg.model))
    if problem is not None:
        where = "" if profile else f" ({cfg.mig_profile})"
        raise ValueError(f"{problem}{where}")
    return instance, profile


def _in_window(df: pl.DataFrame, window: tuple[datetime, datetime] | None) -> pl.DataFrame:
    if window is None:
        return df
    start, end = window
    return df.filter((pl.col("ts") >= start) & (pl.col("ts") < end))


def labels_for(dialect: Dialect, cfg: PrometheusLabels) -> PrometheusLabels:
    """The label names to read `dialect` with: `cfg` (`[clusters.prometheus.labels]`) for DCGM,
    whose labels it configures; else the dialect's own, with "" for a label it does not have
    (no series has a label named "": absent)."""
    if dialect.labels_configurable:
        return cfg
    lb, info = dialect.labels, dialect.info
    return PrometheusLabels(
        host=list(lb.host),
        gpu=lb.gpu or (info.gpu if info and info.gpu else ""),
        uuid=lb.uuid or "",
        job=dialect.job.labels[0] if dialect.job.labels else "",
        pod=[],
        namespace=[],
        node_instance=lb.node_instance,
        gpu_instance=lb.gpu_instance or "",
        mig_profile=lb.mig_profile or (_PROFILE_IN_MODEL if lb.mig_profile_in_model else ""),
        model=lb.model or (info.model if info and info.model else ""),
    )


# the label a MIG profile read from the model label is put under (`Labels.mig_profile_in_model`;
# Prometheus reserves names starting with "__", so no series has it)
_PROFILE_IN_MODEL = "__mig_profile__"


def _profile_from_model(labels: dict[str, str], model: str) -> dict[str, str]:
    """NVML names a MIG device "<its GPU's model> MIG <profile>": the GPU's model and the
    profile, as DCGM's `modelName` and `GPU_I_PROFILE` give them."""
    name = labels.get(model, "")
    parent, sep, profile = name.rpartition(" MIG ")
    if not sep:
        return labels
    return {**labels, model: parent, _PROFILE_IN_MODEL: profile}


def minor_of(labels: Mapping[str, str], dialect: Dialect) -> int | None:
    """The device minor number a series names (DCGM `device="nvidia3"` -> 3), or None."""
    name, prefix = dialect.labels.minor, dialect.labels.minor_prefix
    text = _present(labels, name) if name else None
    if text is None or not text.startswith(prefix):
        return None
    try:
        minor = int(text[len(prefix) :])
    except ValueError:
        return None
    return minor if 0 <= minor < 32768 else None


def _columns(dialect: Dialect, sets: Mapping[str, SeriesSet]) -> list[tuple[str, str, Series]]:
    """(column, metric present, series) of each quantity the dialect gives, utilization first;
    a series read once though it gives two columns (DCGM's SM_ACTIVE: a utilization and the
    profiling metric)."""
    named: list[tuple[str, Series | None]] = [(u.column, u) for u in dialect.util]
    named += [
        ("mem_used_mib", dialect.mem_used),
        ("mem_total_mib", dialect.mem_total),
        ("fb_free", dialect.mem_free),
        ("fb_reserved", dialect.mem_reserved),
        ("sm_active", dialect.sm_active),
        ("tensor_active", dialect.tensor_active),
        ("power_w", dialect.power),
        ("energy_j", dialect.energy),
    ]
    out: list[tuple[str, str, Series]] = []
    for column, series in named:
        if series is None or any(c == column or s.names == series.names for c, _, s in out):
            continue
        metric = next((n for n in series.names if n in sets), series.name)
        out.append((column, metric, series))
    return out


def _with_info(
    sets: Mapping[str, SeriesSet], dialect: Dialect, cfg: PrometheusLabels
) -> Mapping[str, SeriesSet]:
    """The value series with the index and model labels of the dialect's info series (nvidia-smi:
    `nvidia_smi_gpu_info{uuid,index,name} 1`) joined on the host and `info.on`, and with the MIG
    profile read from the model label where the dialect says so (`mig_profile_in_model`)."""
    info = dialect.info
    if dialect.labels.mig_profile_in_model and cfg.model:
        sets = {
            m: SeriesSet(
                [_profile_from_model(lb, cfg.model) for lb in s.labels], s.samples, s.result_type
            )
            if m in dialect.families()
            else s
            for m, s in sets.items()
        }
    if info is None or info.name not in sets:
        return sets
    wanted = [n for n in (info.gpu, info.model) if n]
    found: dict[tuple[str | None, str | None], dict[str, str]] = {}
    for lb in sets[info.name].labels:
        extra = {n: lb[n] for n in wanted if _present(lb, n)}
        found.setdefault((host_of(lb, cfg), _present(lb, info.on)), extra)
    out = dict(sets)
    for metric in dialect.families():
        s = sets.get(metric)
        if s is None or metric == info.name:
            continue
        labels = []
        for lb in s.labels:
            joined = found.get((host_of(lb, cfg), _present(lb, info.on)))
            labels.append({**joined, **lb} if joined else lb)
        out[metric] = SeriesSet(labels, s.samples, s.result_type)
    return out


def gpu_rows(
    sets: Mapping[str, SeriesSet],
    cfg: PrometheusLabels,
    *,
    source: str,
    dialect: Dialect = DCGM,
    window: tuple[datetime, datetime] | None = None,
    times: TimeBounds = TimeBounds(),
    refuse_series: bool = True,
    series_samples: Mapping[str, Sequence[int]] | None = None,
) -> Rows:
    """The series of one telemetry `dialect` by metric name -> `gpu_samples` rows (stored
    columns + cluster-free); samples at a time `times` does not believe are refused. `cfg`
    names DCGM's labels (`labels_for`).

    For input read in parts (the days of a file): `refuse_series=False` drops the series that
    cannot be read without refusing them (the caller refuses them once for the whole input), and
    `series_samples` (per metric, by series) gives a refused series' samples in the whole input
    when `sets` hold one sample standing for them."""
    names = labels_for(dialect, cfg)
    sets = _with_info(sets, dialect, names)
    refused: list[Refused] = []
    keys: dict[tuple[str, int, int | None, str | None, str | None], int] = {}
    # gid -> (mig_profile, gpu_model, gpu_minor)
    details: dict[int, tuple[str | None, str | None, int | None]] = {}
    per_metric: list[tuple[str, pl.DataFrame]] = []
    util_names: dict[str, str] = {}  # utilization column -> the metric read
    no_index = (
        f"no GPU index: no {dialect.info.name} series with its {dialect.info.on}"
        if dialect.info is not None
        else f"no GPU index in label '{names.gpu}'"
    )
    for column, metric, series in _columns(dialect, sets):
        s = sets.get(metric)
        if s is None or not s.labels:
            continue
        if column in {u.column for u in dialect.util}:
            util_names[column] = metric
        scale, maximum = series.scale, series.maximum
        gid_of_sid: list[int | None] = []
        for labels in s.labels:
            host = host_of(labels, names)
            gpu_text = _present(labels, names.gpu)
            gpu: int | None = None
            if gpu_text is not None:
                try:
                    gpu = int(gpu_text)
                except ValueError:
                    gpu = None
            what = ""
            instance, profile = None, None
            if host is None:
                what = "no host label"
            elif gpu is None or not 0 <= gpu < 32768:
                what = no_index
            else:
                try:
                    instance, profile = device_of(labels, names)
                except ValueError as exc:
                    what = str(exc)
            if what and not refuse_series:
                gid_of_sid.append(None)
                continue
            if what:
                counts = series_samples.get(metric) if series_samples is not None else None
                n = (
                    counts[len(gid_of_sid)]
                    if counts is not None
                    else s.samples.filter(pl.col("sid") == len(gid_of_sid)).height
                )
                refused.append(
                    Refused(
                        f"{source}: {describe(metric, labels)}",
                        f"{what}: {n} sample(s) of {metric}",
                        describe(metric, labels),
                    )
                )
                gid_of_sid.append(None)
                continue
            assert gpu is not None and host is not None
            key = (host, gpu, instance, job_of(labels, names), _present(labels, names.uuid))
            device_id = keys.setdefault(key, len(keys))
            details.setdefault(
                device_id, (profile, _present(labels, names.model), minor_of(labels, dialect))
            )
            gid_of_sid.append(device_id)
        samples = _in_window(s.samples, window)
        gid = pl.Series("gid", gid_of_sid, dtype=pl.UInt32).gather(samples["sid"])
        samples = samples.with_columns(gid)
        if None in gid_of_sid:
            samples = samples.filter(pl.col("gid").is_not_null())
        samples = _believed(samples, times, metric, s.labels, names, source, refused)
        slack = _RATIO_SLACK if maximum == 1.0 else 0.0
        good, bad = _bad_value_rows(samples, maximum, slack)
        refused.extend(_refuse_samples(bad, metric, s.labels, source))
        if column == "energy_j":
            good, bad = counter_backwards(good, scale, {g: d[1] for g, d in details.items()})
            refused.extend(_refuse_samples(bad, metric, s.labels, source))
        if column == "power_w":
            models = {g: d[1] for g, d in details.items()}
            good, bad = above_model_limit(good, scale, models)
            refused.extend(_refuse_samples(bad, metric, s.labels, source))
        valid = [g for g in gid_of_sid if g is not None]
        # several series for one (host, gpu, job), or a series with a time twice: one each
        if len(set(valid)) < len(valid) or _unordered(good):
            good, others = conflicting_duplicates(good, ["gid", "ts"], ["value"])
            refused.extend(_refuse_repeats(others, metric, s.labels, source))
        value = (pl.col("value") * scale) if scale != 1.0 else pl.col("value")
        if maximum == 1.0:
            value = value.clip(upper_bound=100.0)
        per_metric.append((column, good.select("gid", "ts", value.alias(column))))

    if not per_metric:
        return Rows(conform(pl.DataFrame(), GPU_SAMPLES, stored=True).clear(), refused)

    merged = per_metric[0][1]
    for column, frame in per_metric[1:]:
        if frame["gid"].equals(merged["gid"]) and frame["ts"].equals(merged["ts"]):
            # the usual case: the exporter's families share series order and scrape times
            merged = merged.with_columns(frame[column])
        else:
            merged = merged.join(frame, on=["gid", "ts"], how="full", coalesce=True)
    have = {c for c, _ in per_metric}

    def col(c: str) -> pl.Expr:
        return pl.col(c) if c in have else pl.lit(None, dtype=pl.Float64)

    key_frame = pl.DataFrame(
        {
            "gid": list(keys.values()),
            "host": [k[0] for k in keys],
            "gpu": [k[1] for k in keys],
            "gpu_instance": [k[2] for k in keys],
            "job_id": [k[3] for k in keys],
            "uuid": [k[4] for k in keys],
            "mig_profile": [details[g][0] for g in keys.values()],
            "gpu_model": [details[g][1] for g in keys.values()],
            "gpu_minor": [details[g][2] for g in keys.values()],
        },
        schema={
            "gid": pl.UInt32,
            "host": pl.String,
            "gpu": pl.Int16,
            "gpu_instance": pl.Int16,
            "job_id": pl.String,
            "uuid": pl.String,
            "mig_profile": pl.String,
            "gpu_model": pl.String,
            "gpu_minor": pl.Int16,
        },
    )
    merged = merged.join(key_frame.select("gid", "gpu_instance"), on="gid", how="left")
    # a series that is not a MIG instance's utilization (DCGM's GPU_UTIL reads 0 on one,
    # dcgm-exporter#216) is never its utilization there
    whole_gpu = pl.col("gpu_instance").is_null()
    utils = [
        (col(u.column) if u.on_mig else pl.when(whole_gpu).then(col(u.column)), u)
        for u in dialect.util
    ]
    util_source: pl.Expr = pl.lit(None, dtype=pl.String)
    for expr, u in reversed(utils):
        name = util_names.get(u.column, u.name)
        util_source = pl.when(expr.is_not_null()).then(pl.lit(name)).otherwise(util_source)
    if dialect.mem_total is not None:
        total = col("mem_total_mib")
    else:
        total = col("mem_used_mib") + col("fb_free") + col("fb_reserved").fill_null(0.0)
    out = merged.select(
        "gid",
        pl.col("ts").cast(UTC_TS),
        pl.coalesce(*(e for e, _ in utils)).alias("util"),
        col("mem_used_mib").alias("mem_used_mib"),
        total.alias("mem_total_mib"),
        col("sm_active").alias("sm_active"),
        col("tensor_active").alias("tensor_active"),
        col("power_w").alias("power_w"),
        pl.coalesce(
            *(e for e, u in utils if u.column == COARSE_UTIL), pl.lit(None, dtype=pl.Float64)
        ).alias(COARSE_UTIL),
        col("energy_j").alias("energy_j"),
        util_source.alias("util_source"),
    ).join(key_frame, on="gid", how="left")
    out = out.with_columns(pl.lit(source).alias("source"))
    gauge = dialect.job.gauge
    if gauge is not None and gauge.name in sets and out.height:
        jobs = _gauge_jobs(sets[gauge.name], dialect, names, source, window, times, refused)
        out = _join_gauge_jobs(out, jobs)
    # One row per (host, gpu, ts, job): a file with repeated samples, or a replaced GPU whose
    # old and new UUID report at the same instant, must not count twice (tests/reliability);
    # a repeat with other values is refused, so that the choice of the first is said.
    out, others = conflicting_duplicates(out, _ROW_KEY, _READINGS)
    refused.extend(refuse_duplicates(others, _ROW_KEY, _READINGS, source))
    return Rows(conform(out, GPU_SAMPLES, stored=True), refused)


def _gauge_jobs(
    s: SeriesSet,
    dialect: Dialect,
    names: PrometheusLabels,
    source: str,
    window: tuple[datetime, datetime] | None,
    times: TimeBounds,
    refused: list[Refused],
) -> pl.DataFrame:
    """A companion gauge whose value is the job on a GPU (older Jobstats' `nvidia_gpu_jobId`) ->
    (host, gpu_minor, ts, gauge_job), the job null where the value says none. Its bad values
    are refused as any series'; a series without host or minor number names no GPU."""
    gauge = dialect.job.gauge
    assert gauge is not None
    hosts: list[str | None] = []
    minors: list[int | None] = []
    for labels in s.labels:
        hosts.append(host_of(labels, names))
        minors.append(minor_of(labels, dialect))
    samples = _in_window(s.samples, window)
    samples = _believed(samples, times, gauge.name, s.labels, names, source, refused)
    good, bad = _bad_value_rows(samples, float("inf"), 0.0)
    refused.extend(_refuse_samples(bad, gauge.name, s.labels, source))
    v = pl.col("value")
    frame = good.select(
        pl.Series("host", hosts, dtype=pl.String).gather(good["sid"]).alias("host"),
        pl.Series("gpu_minor", minors, dtype=pl.Int16).gather(good["sid"]).alias("gpu_minor"),
        pl.col("ts").cast(UTC_TS),
        pl.when(v != gauge.none)
        .then(v.round().cast(pl.Int64).cast(pl.String))
        .otherwise(None)
        .alias("gauge_job"),
    )
    frame = frame.filter(pl.col("host").is_not_null() & pl.col("gpu_minor").is_not_null())
    return frame.unique(subset=["host", "gpu_minor", "ts"], keep="first", maintain_order=True)


def _join_gauge_jobs(out: pl.DataFrame, jobs: pl.DataFrame) -> pl.DataFrame:
    """Rows without a job label take the gauge's job of their GPU (host, minor) at their time."""
    joined = out.join(jobs, on=["host", "gpu_minor", "ts"], how="left", maintain_order="left")
    return joined.with_columns(pl.coalesce("job_id", "gauge_job").alias("job_id")).drop("gauge_job")


_ROW_KEY = ["host", "gpu", "gpu_instance", "job_id", "ts"]
_READINGS = [
    "util",
    "mem_used_mib",
    "mem_total_mib",
    "sm_active",
    "tensor_active",
    "power_w",
    "gpu_util",
    "energy_j",
]


def _host_series(
    s: SeriesSet,
    metric: str,
    cfg: PrometheusLabels,
    source: str,
    refused: list[Refused],
    host_ids: dict[str, int],
    refuse_series: bool = True,
) -> pl.DataFrame:
    """Samples with a `hid` column (index into `host_ids`); series without a host are refused
    (when `refuse_series`)."""
    hids: list[int | None] = []
    for labels in s.labels:
        h = host_of(labels, cfg)
        if h is None:
            if refuse_series:
                refused.append(
                    Refused(
                        f"{source}: {describe(metric, labels)}",
                        f"no host label: series of {metric}",
                        describe(metric, labels),
                    )
                )
            hids.append(None)
        else:
            hids.append(host_ids.setdefault(h, len(host_ids)))
    df = s.samples.with_columns(pl.Series("hid", hids, dtype=pl.UInt32).gather(s.samples["sid"]))
    return df.filter(pl.col("hid").is_not_null()) if None in hids else df


def _unordered(df: pl.DataFrame) -> bool:
    """Whether the samples are not in (sid, ts) order without repeats: a vectorised check that
    Prometheus answers always pass, cheaper than looking for duplicates."""
    step = pl.col("ts").diff()
    unordered = (pl.col("sid").diff() < 0) | ((pl.col("sid").diff() == 0) & (step <= 0))
    return bool(df.select(unordered.any()).item())


def _in_series_order(
    df: pl.DataFrame, metric: str, labels: list[dict[str, str]], source: str
) -> tuple[pl.DataFrame, list[Refused]]:
    """Sorted by (sid, ts), one sample per time (the first; another value refused)."""
    if not _unordered(df):
        return df, []
    kept, others = conflicting_duplicates(df, ["sid", "ts"], ["value"])
    return kept.sort("sid", "ts"), _refuse_repeats(others, metric, labels, source)


def host_rows(
    sets: Mapping[str, SeriesSet],
    cfg: PrometheusLabels,
    *,
    source: str,
    window: tuple[datetime, datetime] | None = None,
    times: TimeBounds = TimeBounds(),
    refuse_series: bool = True,
) -> Rows:
    """node exporter series -> `host_samples` rows (`refuse_series`: as `gpu_rows`).

    CPU utilization at a scrape is 100 x (1 - d(idle + iowait) / d(all modes)) over the interval
    since the previous scrape of the same host, summed over CPUs; the first scrape of a series
    has no interval and gives no CPU value (give the counters' query one extra interval before
    the window). A counter reset makes that interval null. Memory used is 1 - available / total.
    Samples at a time `times` does not believe are refused before any of this.
    """
    refused: list[Refused] = []
    frames: list[pl.DataFrame] = []
    host_ids: dict[str, int] = {}
    cpu = sets.get(NODE_CPU)
    if cpu is not None and cpu.samples.height:
        df = _host_series(cpu, NODE_CPU, cfg, source, refused, host_ids, refuse_series)
        df = _believed(df, times, NODE_CPU, cpu.labels, cfg, source, refused)
        good, bad = _bad_value_rows(df, float("inf"), 0.0)
        refused.extend(_refuse_samples(bad, NODE_CPU, cpu.labels, source))
        idle_of_sid = pl.Series(
            [lb.get("mode", "") in IDLE_MODES for lb in cpu.labels], dtype=pl.Boolean
        )
        good, repeats = _in_series_order(good, NODE_CPU, cpu.labels, source)
        refused.extend(repeats)
        delta = pl.col("value").diff()
        same = pl.col("sid").diff() == 0
        deltas = good.select(
            "hid",
            "ts",
            pl.when(same & (delta >= 0)).then(delta).alias("delta"),
            idle_of_sid.gather(good["sid"]).alias("idle"),
            same.fill_null(False).alias("has_prev"),
        ).filter(pl.col("has_prev"))
        per_host = (
            deltas.group_by("hid", "ts")
            .agg(
                pl.col("delta").sum().alias("total"),
                pl.when(pl.col("idle")).then(pl.col("delta")).otherwise(0.0).sum().alias("idle"),
                pl.col("delta").null_count().alias("nulls"),
            )
            .filter((pl.col("nulls") == 0) & (pl.col("total") > 0))
            .select(
                "hid",
                "ts",
                (100.0 * (1.0 - pl.col("idle") / pl.col("total")))
                .clip(0.0, 100.0)
                .alias("cpu_util"),
            )
        )
        frames.append(_in_window(per_host, window))
    avail, total = sets.get(NODE_MEM_AVAILABLE), sets.get(NODE_MEM_TOTAL)
    if avail is not None and total is not None and avail.samples.height and total.samples.height:
        parts = []
        for metric, s_, col in (
            (NODE_MEM_AVAILABLE, avail, "avail"),
            (NODE_MEM_TOTAL, total, "total"),
        ):
            df = _in_window(
                _host_series(s_, metric, cfg, source, refused, host_ids, refuse_series), window
            )
            df = _believed(df, times, metric, s_.labels, cfg, source, refused)
            good, bad = _bad_value_rows(df, float("inf"), 0.0)
            refused.extend(_refuse_samples(bad, metric, s_.labels, source))
            good, others = conflicting_duplicates(good, ["hid", "ts"], ["value"])
            refused.extend(_refuse_repeats(others, metric, s_.labels, source))
            parts.append(good.select("hid", "ts", pl.col("value").alias(col)))
        mem = (
            parts[0]
            .join(parts[1], on=["hid", "ts"], how="inner")
            .filter(pl.col("total") > 0)
            .select(
                "hid",
                "ts",
                (1.0 - pl.col("avail") / pl.col("total")).clip(0.0, 1.0).alias("mem_used_frac"),
            )
        )
        frames.append(mem)
    if not frames:
        return Rows(conform(pl.DataFrame(), HOST_SAMPLES, stored=True).clear(), refused)
    out = frames[0]
    for f in frames[1:]:
        out = out.join(f, on=["hid", "ts"], how="full", coalesce=True)
    names = pl.Series("host", list(host_ids), dtype=pl.String)
    out = out.with_columns(names.gather(out["hid"]).alias("host"), pl.lit(source).alias("source"))
    return Rows(conform(out, HOST_SAMPLES, stored=True), refused)
