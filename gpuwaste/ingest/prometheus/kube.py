"""Kubernetes pods with GPU requests -> `jobs` rows, from kube-state-metrics (pure).

Input: series of the kube-state-metrics families (raw samples of a window, as the Prometheus
source fetches them, or a saved scrape parsed by `openmetrics.parse_text`). A job is a pod that
requests the configured GPU resource (`kube_pod_container_resource_requests{resource=
"nvidia_com_gpu"}`); its id is `namespace/pod`, the same id `prometheus.rows.job_of` gives the
DCGM samples of that pod, so `job_gpus` (GPU assignment from the DCGM `pod` label) joins it.

- `gpus`: the sum over the pod's containers of their last GPU request: the configured resource,
  and MIG instances (`nvidia.com/mig-1g.10gb`, written `nvidia_com_mig_1g_10gb` by
  kube-state-metrics), one device each. Which instance a pod got comes from the DCGM `pod`
  label of the instance's series, as for whole GPUs.
- `start_ts` / `submit_ts`: the last value of `kube_pod_start_time` / `kube_pod_created`.
- `end_ts`: `kube_pod_completion_time` when present; else, if the pod's series stopped before
  the newest data (`newest - running_slack`), the last sample (the pod was deleted); else null.
- `state` from the last phase (the `kube_pod_status_phase` series whose last value is 1):
  Succeeded -> passed, Failed -> unsuccessful, Pending / Running -> running, and a pod deleted
  while Pending or Running -> killed (`raw_state` keeps the phase, with "deleted").
- `vc`: the pod label `vc_label` (from `kube_pod_labels`, `label_<name>`), else the namespace.
- `is_debug`: the namespace is in `debug_namespaces`, or the pod label `debug_label` is present
  and not false/0/no.
Series joins use namespace + pod (older kube-state-metrics put `uid` on `kube_pod_info` only).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime, timedelta

import polars as pl

from gpuwaste.config import KubernetesJobs
from gpuwaste.ingest.prometheus.parse import SeriesSet
from gpuwaste.warehouse.schema import JOBS, UTC_TS, conform

REQUESTS = "kube_pod_container_resource_requests"
START = "kube_pod_start_time"
COMPLETION = "kube_pod_completion_time"
CREATED = "kube_pod_created"
PHASE = "kube_pod_status_phase"
INFO = "kube_pod_info"
LABELS = "kube_pod_labels"
KUBE_METRICS = (REQUESTS, START, COMPLETION, CREATED, PHASE, INFO, LABELS)

PHASE_STATE = {
    "Succeeded": "passed",
    "Failed": "unsuccessful",
    "Pending": "running",
    "Running": "running",
}
_FALSE = {"", "false", "0", "no", "off"}
MIG_RESOURCE = re.compile(r"^nvidia_com_mig_\d+g_\d+gb(?:_me)?$")  # nvidia.com/mig-<profile>


def label_key(pod_label: str) -> str:
    """The kube_pod_labels label for a pod label (`queue` -> `label_queue`, `a.b/c` -> `label_a_b_c`)."""
    return "label_" + re.sub(r"[^a-zA-Z0-9_]", "_", pod_label)


def _last_per_series(s: SeriesSet | None, *, extra: tuple[str, ...] = ()) -> pl.DataFrame:
    """One row per series: namespace, pod, extra labels, last ts and last value."""
    cols = {"namespace": pl.String, "pod": pl.String, **dict.fromkeys(extra, pl.String)}
    if s is None or not s.labels or s.samples.height == 0:
        return pl.DataFrame(schema={**cols, "last_ts": UTC_TS, "value": pl.Float64})
    lab = pl.DataFrame(
        {
            "sid": range(len(s.labels)),
            **{c: [lb.get(c) or None for lb in s.labels] for c in cols},
        },
        schema={"sid": pl.UInt32, **cols},
    )
    last = (
        s.samples.filter(pl.col("value").is_finite())
        .sort("ts")
        .group_by("sid")
        .agg(pl.col("ts").last().alias("last_ts"), pl.col("value").last())
    )
    return last.join(lab, on="sid").drop("sid").filter(pl.col("pod").is_not_null())


def _unix(col: str) -> pl.Expr:
    return (pl.col(col) * 1_000_000).round().cast(pl.Int64).cast(UTC_TS)


def pods_to_jobs(
    sets: Mapping[str, SeriesSet],
    cfg: KubernetesJobs,
    *,
    newest: datetime,
    running_slack: timedelta,
    source: str = "kubernetes",
) -> pl.DataFrame:
    """kube-state-metrics series -> `jobs` rows (stored columns) for pods requesting GPUs."""
    req = _last_per_series(sets.get(REQUESTS), extra=("resource", "container"))
    req = req.filter(
        (pl.col("resource") == cfg.gpu_resource)
        | pl.col("resource").str.contains(MIG_RESOURCE.pattern)
    )
    if req.height == 0:
        return conform(pl.DataFrame(), JOBS, stored=True).clear()
    pods = req.group_by("namespace", "pod").agg(
        pl.col("value").sum().round().cast(pl.Int32).alias("gpus"),
        pl.col("last_ts").max().alias("last_seen"),
    )
    keys = ["namespace", "pod"]
    for metric, name in ((START, "start_ts"), (COMPLETION, "end_done"), (CREATED, "submit_ts")):
        v = _last_per_series(sets.get(metric))
        v = v.group_by(keys).agg(pl.col("value").max()).select(*keys, _unix("value").alias(name))
        pods = pods.join(v, on=keys, how="left")
    phase = (
        _last_per_series(sets.get(PHASE), extra=("phase",))
        .filter(pl.col("value") == 1)
        .sort("last_ts")
        .group_by(keys)
        .agg(pl.col("phase").last())
    )
    pods = pods.join(phase, on=keys, how="left")
    label_cols = tuple(label_key(x) for x in (cfg.vc_label, cfg.debug_label) if x is not None)
    if label_cols:
        lab = _last_per_series(sets.get(LABELS), extra=label_cols)
        lab = lab.group_by(keys).agg(pl.col(c).drop_nulls().last() for c in label_cols)
        pods = pods.join(lab, on=keys, how="left")
    info = _last_per_series(sets.get(INFO), extra=("created_by_name",))
    info = info.group_by(keys).agg(pl.col("created_by_name").drop_nulls().last())
    pods = pods.join(info, on=keys, how="left")

    gone = pl.col("last_seen") < pl.lit(newest - running_slack).cast(UTC_TS)
    active = pl.col("phase").is_in(["Pending", "Running"])
    vc = pl.col(label_key(cfg.vc_label)) if cfg.vc_label else pl.lit(None, dtype=pl.String)
    debug = pl.col("namespace").is_in(cfg.debug_namespaces)
    if cfg.debug_label:
        flag = pl.col(label_key(cfg.debug_label))
        debug = debug | (flag.is_not_null() & ~flag.str.to_lowercase().is_in(list(_FALSE)))
    jobs = pods.select(
        (pl.col("namespace") + "/" + pl.col("pod")).alias("job_id"),
        pl.lit(None, dtype=pl.String).alias("user"),
        pl.coalesce(vc, pl.col("namespace")).alias("vc"),
        pl.coalesce(pl.col("created_by_name"), pl.col("pod")).alias("name"),
        pl.when(gone & active)
        .then(pl.lit("killed"))
        .otherwise(pl.col("phase").replace_strict(PHASE_STATE, default=None))
        .alias("state"),
        pl.when(gone & active)
        .then(pl.col("phase") + " (deleted)")
        .otherwise(pl.col("phase"))
        .alias("raw_state"),
        "submit_ts",
        "start_ts",
        pl.coalesce(pl.col("end_done"), pl.when(gone).then(pl.col("last_seen"))).alias("end_ts"),
        "gpus",
        debug.fill_null(False).alias("is_debug"),
        pl.lit(source).alias("source"),
    )
    return conform(jobs, JOBS, stored=True).sort("job_id")


def merge_jobs(old: pl.DataFrame, new: pl.DataFrame) -> pl.DataFrame:
    """Stored jobs + a window's jobs: the newer row wins, but the earliest start/submit stays."""
    old = conform(old, JOBS, stored=True)
    new = conform(new, JOBS, stored=True)
    earlier = old.select(
        "job_id", pl.col("start_ts").alias("_old_start"), pl.col("submit_ts").alias("_old_submit")
    )
    merged = new.join(earlier, on="job_id", how="left").with_columns(
        pl.min_horizontal("start_ts", "_old_start").alias("start_ts"),
        pl.min_horizontal("submit_ts", "_old_submit").alias("submit_ts"),
    )
    return conform(merged, JOBS, stored=True)
