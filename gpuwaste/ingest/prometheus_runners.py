"""Source runners registered with gpuwaste.ingest.base.register_source.

- `prometheus`: a cluster's Prometheus-compatible server (see prometheus_ingest).
- `openmetrics`: a saved OpenMetrics / Prometheus text file (`.om`, `.om.gz`, `.prom`), through
  the same row builders; the demo loads the bundled sample this way, with no server.

The one-off command-line form passes `--since` / `--until` through `ONE_OFF_WINDOW` (a context
variable), since a runner's signature is the same for every source.
"""

from __future__ import annotations

import gzip
import zlib
from contextvars import ContextVar
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl

from gpuwaste.config import ClusterConfig, PrometheusLabels, Settings
from gpuwaste.ingest import kube, telemetry_jobs
from gpuwaste.ingest.base import IngestError, IngestResult, register_source
from gpuwaste.ingest.job_precedence import (
    OPENMETRICS_KUBE_KEY,
    OPENMETRICS_SPANS_KEY,
    OPENMETRICS_TELEMETRY_KEY,
    TELEMETRY_KEY,
    label_jobs_wanted,
)
from gpuwaste.ingest.openmetrics import parse_text
from gpuwaste.ingest.prometheus_ingest import ingest_prometheus, scheduler_configured
from gpuwaste.ingest.prometheus_parse import SeriesSet
from gpuwaste.ingest.prometheus_rows import (
    GPU_METRICS,
    HOST_METRICS,
    gpu_rows,
    host_rows,
    none_read,
)
from gpuwaste.ingest.slurm_source import fill_unknown_gpus
from gpuwaste.warehouse.bookkeeping import set_watermark, write_quarantine
from gpuwaste.warehouse.store import Warehouse

ONE_OFF_WINDOW: ContextVar[tuple[datetime | None, datetime | None]] = ContextVar(
    "prometheus_one_off_window", default=(None, None)
)
OPENMETRICS = "openmetrics"


@register_source("prometheus", lambda c: c.prometheus is not None)
def run_prometheus(settings: Settings, cluster: ClusterConfig, quiet: bool) -> IngestResult:
    since, until = ONE_OFF_WINDOW.get()
    return ingest_prometheus(settings, cluster, since=since, until=until, quiet=quiet)


def read_metrics_file(path: Path) -> str:
    """The text of `.om` / `.prom` / `.om.gz`; one IngestError sentence when it is not that."""
    if not path.is_file():
        raise IngestError(f"OpenMetrics file {path} does not exist.")
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        return raw.decode("utf-8")
    except (OSError, EOFError, zlib.error) as exc:
        raise IngestError(f"could not read OpenMetrics file {path}: {exc}.") from None
    except UnicodeDecodeError:
        raise IngestError(f"{path} is not OpenMetrics text (not UTF-8).") from None


def ingest_openmetrics(
    settings: Settings, cluster: ClusterConfig, path: Path, *, quiet: bool = False
) -> IngestResult:
    """Load one text file; re-loading it replaces its time range (source `openmetrics`)."""
    text = read_metrics_file(path)
    mtime = datetime.fromtimestamp(path.stat().st_mtime, UTC)
    parsed = parse_text(text, location=str(path), default_ts=mtime)
    if not parsed.series:
        if parsed.refused:
            raise IngestError(
                f"{path} is not OpenMetrics text: none of its {parsed.lines} lines is a sample "
                f"(first refused: line {parsed.refused[0].location.rsplit(':', 1)[-1]})."
            )
        raise IngestError(f"{path} holds no metric samples.")
    if not set(parsed.series) & {*GPU_METRICS, *HOST_METRICS}:
        raise IngestError(f"{path} holds {none_read(sorted(parsed.series))}; nothing was written.")
    labels = cluster.prometheus.labels if cluster.prometheus else PrometheusLabels()
    gpu = gpu_rows(parsed.series, labels, source=OPENMETRICS)
    host = host_rows(parsed.series, labels, source=OPENMETRICS)
    result = IngestResult(source=OPENMETRICS, cluster=cluster.name)
    refused = parsed.refused + gpu.refused + host.refused
    wh = Warehouse(settings.data_dir)
    bounds = _bounds([gpu.frame, host.frame])
    if bounds is not None:
        start, end = bounds
        result.written["gpu_samples"] = wh.replace_window(
            "gpu_samples", cluster.name, start, end, gpu.frame, source=OPENMETRICS
        )
        result.written["host_samples"] = wh.replace_window(
            "host_samples", cluster.name, start, end, host.frame, source=OPENMETRICS
        )
    write_quarantine(wh, cluster.name, OPENMETRICS, path.name, refused)
    _openmetrics_jobs(wh, cluster, gpu.frame, parsed.series)
    if bounds is not None:
        fill_unknown_gpus(wh, cluster.name, *bounds)
        set_watermark(wh, cluster.name, OPENMETRICS, bounds[1], {"file": str(path)})
    result.accepted = gpu.frame.height + host.frame.height
    result.refused = refused
    result.note = f"{path.name}"
    return result


def _bounds(frames: list[pl.DataFrame]) -> tuple[datetime, datetime] | None:
    """[first, last + 1 µs) over the `ts` of the frames, None when all are empty."""
    lo: list[datetime] = []
    hi: list[datetime] = []
    for f in frames:
        if f.height:
            a, b = f["ts"].min(), f["ts"].max()
            assert isinstance(a, datetime) and isinstance(b, datetime)
            lo.append(a)
            hi.append(b)
    if not lo:
        return None
    return min(lo), max(hi) + timedelta(microseconds=1)


def _openmetrics_jobs(
    wh: Warehouse, cluster: ClusterConfig, gpu: pl.DataFrame, series: dict[str, SeriesSet]
) -> None:
    """Jobs from the file's labels (or its kube-state-metrics series) while no scheduler source
    is configured or stored for the cluster (job_precedence)."""
    if scheduler_configured(cluster) or not label_jobs_wanted(wh, cluster.name):
        return
    prom = cluster.prometheus
    interval = prom.scrape_interval_s if prom else 15.0
    spans = telemetry_jobs.spans_from_samples(gpu, interval)
    if spans.height == 0:
        return
    wh.replace_file("job_gpus", cluster.name, OPENMETRICS_SPANS_KEY, spans)
    newest = gpu["ts"].max()
    assert isinstance(newest, datetime)
    slack = timedelta(seconds=3 * interval)
    if prom is not None and prom.kubernetes.enabled:
        sets = {k: v for k, v in series.items() if k in kube.KUBE_METRICS}
        jobs = kube.pods_to_jobs(sets, prom.kubernetes, newest=newest, running_slack=slack)
        wh.replace_file("jobs", cluster.name, OPENMETRICS_KUBE_KEY, jobs)
    else:
        jobs = telemetry_jobs.jobs_from_spans(
            spans, newest=newest, running_slack=slack, source=TELEMETRY_KEY
        )
        wh.replace_file("jobs", cluster.name, OPENMETRICS_TELEMETRY_KEY, jobs)


@register_source(OPENMETRICS, lambda c: c.openmetrics is not None)
def run_openmetrics(settings: Settings, cluster: ClusterConfig, quiet: bool) -> IngestResult:
    assert cluster.openmetrics is not None
    return ingest_openmetrics(settings, cluster, cluster.openmetrics.file, quiet=quiet)
