"""The `openmetrics` source: a saved OpenMetrics / Prometheus text file (`.om`, `.om.gz`,
`.prom`) -> gpu_samples, host_samples and (as the Prometheus source) jobs from labels or pods.

Parsed by `openmetrics_parse` and turned into rows by the same builders as the Prometheus source
(`rows.gpu_rows` / `host_rows`); the demo loads the bundled sample this way, with no server.
Re-loading a file replaces its time range.
"""

from __future__ import annotations

import gzip
import zlib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl

from gpuwaste.config import ClusterConfig, PrometheusLabels, Settings
from gpuwaste.ingest.base import IngestError, IngestResult, RunOptions
from gpuwaste.ingest.gpu_indices import fill_unknown_gpus
from gpuwaste.ingest.job_precedence import (
    OPENMETRICS_KUBE_KEY,
    OPENMETRICS_SPANS_KEY,
    OPENMETRICS_TELEMETRY_KEY,
    TELEMETRY_KEY,
    label_jobs_wanted,
)
from gpuwaste.ingest.prometheus import kube, telemetry_jobs
from gpuwaste.ingest.prometheus.openmetrics_parse import parse_text
from gpuwaste.ingest.prometheus.parse import SeriesSet
from gpuwaste.ingest.prometheus.rows import (
    GPU_METRICS,
    HOST_METRICS,
    gpu_rows,
    host_rows,
    none_read,
)
from gpuwaste.ingest.prometheus.source import scheduler_configured
from gpuwaste.ingest.times import TimeBounds
from gpuwaste.warehouse.bookkeeping import set_watermark, write_quarantine
from gpuwaste.warehouse.store import Warehouse

OPENMETRICS = "openmetrics"


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


def ingest_openmetrics(settings: Settings, cluster: ClusterConfig, path: Path) -> IngestResult:
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
    times = TimeBounds.at(datetime.now(UTC), settings.ingest)  # a file's "now": this run
    gpu = gpu_rows(parsed.series, labels, source=OPENMETRICS, times=times)
    host = host_rows(parsed.series, labels, source=OPENMETRICS, times=times)
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


def run_openmetrics(
    settings: Settings, cluster: ClusterConfig, options: RunOptions
) -> IngestResult:
    """The configured file of `cluster` (its runner in `ingest.sources`)."""
    assert cluster.openmetrics is not None
    return ingest_openmetrics(settings, cluster, cluster.openmetrics.file)
