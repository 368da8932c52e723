"""Which jobs count when telemetry labels and a scheduler both describe one cluster.

Scheduler records (`slurm`, `philly`, `csv` / `parquet` jobs) are the jobs. Jobs derived from
the job labels of telemetry (DCGM `hpc_job` / `pod`, source `telemetry`) stand in for them only
while no scheduler record of the cluster is in the warehouse. This is decided from the
warehouse, not from the configuration, so one-off commands, configured runs and re-runs give the
same tables whatever order the sources arrive in:

- a scheduler ingest, once its jobs are written, removes the label-derived jobs of its cluster
  and their `job_gpus` spans (`yield_label_jobs`);
- a telemetry ingest derives jobs only while no scheduler jobs are stored (`label_jobs_wanted`).

Jobs from kube-state-metrics pods (`kubernetes`) are records of their own, not label-derived:
they are left alone, and so are the spans that give their GPUs.
"""

from __future__ import annotations

import polars as pl

from gpuwaste.warehouse.store import Warehouse

# `jobs` files written from telemetry labels (Prometheus runs; OpenMetrics files)
TELEMETRY_KEY = "telemetry"
OPENMETRICS_TELEMETRY_KEY = "openmetrics-telemetry"
LABEL_JOB_KEYS = (TELEMETRY_KEY, OPENMETRICS_TELEMETRY_KEY)
# `jobs` files of kube-state-metrics pods
KUBE_KEY = "kubernetes"
OPENMETRICS_KUBE_KEY = "openmetrics-kubernetes"
KUBE_JOB_KEYS = (KUBE_KEY, OPENMETRICS_KUBE_KEY)
# `job_gpus` files of the GPU spans seen in the samples' job labels (Prometheus runs; files)
SPANS_KEY = "prometheus"
OPENMETRICS_SPANS_KEY = "openmetrics"
SPAN_KEYS = (SPANS_KEY, OPENMETRICS_SPANS_KEY)


def _keys(wh: Warehouse, name: str, cluster: str) -> set[str]:
    """File keys of a per-cluster table for one cluster (`slurm` for `.../slurm.parquet`)."""
    base = wh.cluster_dir(name, cluster)
    return {p.stem for p in base.glob("*.parquet")} if base.is_dir() else set()


def scheduler_jobs_stored(wh: Warehouse, cluster: str) -> bool:
    """True if the warehouse holds jobs of this cluster from a scheduler source."""
    return bool(_keys(wh, "jobs", cluster) - set(LABEL_JOB_KEYS) - set(KUBE_JOB_KEYS))


def label_jobs_wanted(wh: Warehouse, cluster: str) -> bool:
    """Should a telemetry ingest derive jobs from labels? Not once scheduler jobs are stored;
    any label-derived jobs still there (an older warehouse) are removed then."""
    return not yield_label_jobs(wh, cluster)


def yield_label_jobs(wh: Warehouse, cluster: str) -> bool:
    """If scheduler jobs of `cluster` are stored, remove its label-derived jobs and their spans.

    Returns True when scheduler jobs are stored (whether or not anything had to be removed).
    Removing whole files keeps the change atomic per file; `analyze` sees the jobs' records
    change (their fingerprints) and recomputes them.
    """
    if not scheduler_jobs_stored(wh, cluster):
        return False
    present = _keys(wh, "jobs", cluster)
    for key in LABEL_JOB_KEYS:
        if key in present:
            wh.remove_file("jobs", cluster, key)
    kube_ids = pl.concat([wh.read("jobs", cluster, k)["job_id"] for k in KUBE_JOB_KEYS])
    spans_present = _keys(wh, "job_gpus", cluster)
    for key in SPAN_KEYS:
        if key not in spans_present:
            continue
        spans = wh.read("job_gpus", cluster, key)
        kept = spans.filter(pl.col("job_id").is_in(kube_ids.implode()))
        if kept.height == 0:
            wh.remove_file("job_gpus", cluster, key)
        elif kept.height < spans.height:
            wh.replace_file("job_gpus", cluster, key, kept)
    return True
