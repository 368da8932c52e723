"""Pull DCGM, node-exporter and kube-state-metrics series from Prometheus into the warehouse.

One run covers [watermark, until) (a first run starts at `--since`, default 7 days ago) in
windows that never overlap and never ask for more than `max_points_per_query` points per series
at the scrape interval. For each window, in this order:

1. fetch each metric present as a *raw range selector* (`metric{filter}[<window>ms]` evaluated
   at the window's last millisecond): Prometheus returns the stored samples, so a GPU that
   vanished for ten minutes is ten minutes of missing data, not of its last value (which
   `query_range` would repeat for up to 5 minutes of lookback);
2. parse to rows (pure: `rows`, `kube`, `telemetry_jobs`), refusing bad values;
3. write `gpu_samples` and `host_samples` with `replace_window` (atomic per day file and
   block of hosts; the window's earlier rows of this source are replaced, so a re-run never
   duplicates), the window's quarantine batch, and the jobs / job_gpus derived so far;
4. only then advance the watermark to the window's end.

A crash or a lost server at any point leaves every finished window written and the watermark at
the last of them; the next run redoes at most the interrupted window, and rewriting it replaces
rather than adds. A selection the server refuses as too large (HTTP 422) is split in halves.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import polars as pl

from gpuwaste.config import ClusterConfig, PrometheusSource, Settings
from gpuwaste.dialects import Dialect, dialect
from gpuwaste.ingest.base import IngestError, IngestResult, RunOptions
from gpuwaste.ingest.gpu_indices import fill_unknown_gpus
from gpuwaste.ingest.job_local_gpus import JobLocalPlacer
from gpuwaste.ingest.job_precedence import KUBE_KEY, SPANS_KEY, TELEMETRY_KEY, label_jobs_wanted
from gpuwaste.ingest.progress import window_progress
from gpuwaste.ingest.prometheus import kube, telemetry_jobs
from gpuwaste.ingest.prometheus.client import PrometheusClient, TooManySamples
from gpuwaste.ingest.prometheus.dialect_choice import (
    DialectAbsent,
    LeftOut,
    choose,
    keep_preferred,
    telemetry_note,
)
from gpuwaste.ingest.prometheus.parse import SeriesSet, concat_sets
from gpuwaste.ingest.prometheus.rows import (
    ALL_GPU_METRICS,
    HOST_METRICS,
    NODE_CPU,
    gpu_rows,
    host_rows,
    none_read,
)
from gpuwaste.ingest.times import TimeBounds
from gpuwaste.warehouse.bookkeeping import (
    QUARANTINE_KEY,
    Refused,
    get_watermark,
    set_watermark,
    write_quarantine,
)
from gpuwaste.warehouse.store import Warehouse

SOURCE = "prometheus"
DEFAULT_SINCE = timedelta(days=7)
SETTLE = timedelta(seconds=60)  # data newer than now - SETTLE may still be arriving
KUBE_LOOKBACK = timedelta(minutes=5)  # see a pod that vanished right at the previous window's end
MIN_SPLIT = timedelta(minutes=1)

AfterWindow = Callable[[int, datetime], None]


def _ms(dt: datetime) -> datetime:
    return dt.replace(microsecond=dt.microsecond // 1000 * 1000)


def plan_windows(
    start: datetime, end: datetime, window: timedelta
) -> list[tuple[datetime, datetime]]:
    """Half-open windows [a, b) covering [start, end), each at most `window` long."""
    out = []
    a = start
    while a < end:
        b = min(end, a + window)
        out.append((a, b))
        a = b
    return out


def window_length(src: PrometheusSource, override_s: float | None = None) -> timedelta:
    """Longest window with at most `max_points_per_query` points per series."""
    # the counters' selection reaches two intervals before the window: keep a margin of three
    seconds = (src.max_points_per_query - 3) * src.scrape_interval_s
    if override_s is not None:
        seconds = min(seconds, override_s)
    return timedelta(seconds=max(seconds, 1.0))


def matchers(label_filter: str) -> str:
    """`{cluster="a"}` or `cluster="a"` -> `cluster="a"` (the inside of a selector)."""
    inner = label_filter.strip()
    if inner.startswith("{") and inner.endswith("}"):
        inner = inner[1:-1]
    return inner.strip().strip(",")


def selector(metric: str, inner: str, extra: str = "") -> str:
    parts = [p for p in (inner, extra) if p]
    return f"{metric}{{{','.join(parts)}}}"


def scheduler_configured(cluster: ClusterConfig) -> bool:
    """Does the configuration give this cluster a source of scheduler jobs?"""
    if cluster.slurm is not None or cluster.philly is not None:
        return True
    return any(t is not None and t.jobs is not None for t in (cluster.csv, cluster.parquet))


def derives_jobs(wh: Warehouse, cluster: ClusterConfig) -> tuple[bool, bool]:
    """(kubernetes jobs, jobs from telemetry labels) for this cluster: labels only when neither
    the configuration nor the warehouse has a scheduler source for it (job_precedence)."""
    src = cluster.prometheus
    assert src is not None
    kube_on = src.kubernetes.enabled
    labels = src.jobs_from_labels and not kube_on and not scheduler_configured(cluster)
    return kube_on, labels and label_jobs_wanted(wh, cluster.name)


class Fetcher:
    """Raw range selections for one window, split in halves when the server says too large."""

    def __init__(self, client: PrometheusClient, inner: str) -> None:
        self.client = client
        self.inner = inner
        self.samples = 0

    def raw(self, metric: str, start: datetime, end: datetime, extra: str = "") -> SeriesSet:
        """Samples of `metric` with start <= ts < end (ms resolution)."""
        s = self._raw(metric, start, end, extra)
        self.samples += s.n_samples
        return s

    def _raw(self, metric: str, start: datetime, end: datetime, extra: str) -> SeriesSet:
        span_ms = round((end - start).total_seconds() * 1000)
        at = end - timedelta(milliseconds=1)
        query = f"{selector(metric, self.inner, extra)}[{span_ms}ms]"
        try:
            s = self.client.query(query, at)
        except TooManySamples:
            if end - start <= MIN_SPLIT:
                raise
            mid = _ms(start + (end - start) / 2)
            return concat_sets(
                [self._raw(metric, start, mid, extra), self._raw(metric, mid, end, extra)]
            )
        if s.result_type != "matrix":
            raise IngestError(
                f"the server at {self.client.url} answered the range selector {query!r} with an "
                f"instant {s.result_type} ({len(s.labels)} series), not the stored samples (a "
                "matrix) that a Prometheus query API returns: it cannot be read as Prometheus; "
                "nothing was written for this window."
            )
        # Prometheus 2.x includes a sample exactly at `at - range`; 3.x does not: filter here.
        return SeriesSet(s.labels, s.samples.filter((pl.col("ts") >= start) & (pl.col("ts") < end)))


def _names_regex(names: tuple[str, ...]) -> str:
    return "|".join(names)


def ingest_prometheus(
    settings: Settings,
    cluster: ClusterConfig,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    quiet: bool = False,
    window_s: float | None = None,
    after_window: AfterWindow | None = None,
    now: datetime | None = None,
    telemetry: str | None = None,
) -> IngestResult:
    """Ingest [watermark or since, until) of one cluster's Prometheus; see the module docstring.

    `telemetry` names the GPU dialect (default: the cluster's `telemetry`, else the dialects
    recognised from the GPU series the server holds over the whole range: one request more)."""
    src = cluster.prometheus
    if src is None:
        raise ValueError(f"cluster {cluster.name} has no prometheus source")
    wh = Warehouse(settings.data_dir)
    now = now or datetime.now(UTC)
    watermark = get_watermark(wh, cluster.name, SOURCE)
    start = watermark or since or (now - DEFAULT_SINCE)
    # never past what has surely arrived: a later run would skip samples still in flight
    end = min(until, now - SETTLE) if until is not None else now - SETTLE
    start, end = _ms(start.astimezone(UTC)), _ms(end.astimezone(UTC))
    result = IngestResult(source=SOURCE, cluster=cluster.name)
    windows = plan_windows(start, end, window_length(src, window_s))
    if not windows:
        result.note = f"up to date (watermark {start.isoformat()})"
        return result
    kube_on, telemetry_on = derives_jobs(wh, cluster)
    inner = matchers(src.label_filter)
    interval = timedelta(seconds=src.scrape_interval_s)
    slack = 3 * interval
    # The windows end before `now`, so no sample from the future is ever asked for; the floor
    # (`[ingest] earliest_time`) still applies to a `--since` before it.
    times = TimeBounds.at(now, settings.ingest)
    written: dict[str, int] = {}
    seen: set[str] = set()  # metrics present in any window
    named = telemetry or cluster.telemetry
    how = "--telemetry" if telemetry else "configured" if named else "recognised from its series"
    left_out = LeftOut()
    t0 = time.perf_counter()
    with PrometheusClient(src) as client, window_progress(quiet) as progress:
        chosen = _dialects(client, inner, named, start, end)
        placer = (
            JobLocalPlacer.from_warehouse(wh, cluster.name)
            if any(d.gpu_is_job_local for d in chosen)
            else None
        )
        gpu_metrics = tuple(dict.fromkeys(m for d in chosen for m in d.families()))
        fetcher = Fetcher(client, inner)
        task = progress.add_task(f"{cluster.name} prometheus", total=len(windows), rate="")
        for i, (ws, we) in enumerate(windows):
            wanted = gpu_metrics + HOST_METRICS + (kube.KUBE_METRICS if kube_on else ())
            present = client.metric_names(_names_match(wanted, inner), ws, we)
            seen |= present
            sets: dict[str, SeriesSet] = {}
            for metric in gpu_metrics:
                if metric in present:
                    sets[metric] = fetcher.raw(metric, ws, we)
            for metric in HOST_METRICS:
                if metric in present:
                    lead = 2 * interval if metric == NODE_CPU else timedelta(0)
                    sets[metric] = fetcher.raw(metric, ws - lead, we)
            window = (ws, we)
            gpu_refused: list[Refused] = []
            frames: list[tuple[Dialect, pl.DataFrame]] = []
            for d in chosen:
                rows = gpu_rows(
                    sets, src.labels, source=SOURCE, dialect=d, window=window, times=times
                )
                gpu_refused += rows.refused
                placed = placer.place(rows.frame) if placer and d.gpu_is_job_local else rows.frame
                frames.append((d, placed))
            gpu_frame = (
                keep_preferred(frames, left_out)
                if frames
                else gpu_rows({}, src.labels, source=SOURCE).frame
            )
            host = host_rows(sets, src.labels, source=SOURCE, window=window, times=times)
            kube_sets: dict[str, SeriesSet] = {}
            if kube_on:
                for metric in kube.KUBE_METRICS:
                    if metric in present:
                        extra = (
                            f'resource="{src.kubernetes.gpu_resource}"'
                            if metric == kube.REQUESTS
                            else ""
                        )
                        kube_sets[metric] = fetcher.raw(metric, ws - KUBE_LOOKBACK, we, extra)
            # ---- writes: samples, quarantine, jobs; then the watermark
            n = wh.replace_window("gpu_samples", cluster.name, ws, we, gpu_frame, source=SOURCE)
            written["gpu_samples"] = written.get("gpu_samples", 0) + n
            n = wh.replace_window("host_samples", cluster.name, ws, we, host.frame, source=SOURCE)
            written["host_samples"] = written.get("host_samples", 0) + n
            refused: list[Refused] = gpu_refused + host.refused
            _write_window_quarantine(wh, cluster.name, ws, we, refused)
            if kube_on or telemetry_on:
                _write_jobs(wh, cluster.name, gpu_frame, kube_sets, src, we, slack, kube_on)
            set_watermark(
                wh,
                cluster.name,
                SOURCE,
                we,
                {"url": src.url, "window": [ws.isoformat(), we.isoformat()]},
            )
            result.accepted += gpu_frame.height + host.frame.height
            result.refused.extend(refused)
            elapsed = max(time.perf_counter() - t0, 1e-9)
            progress.update(task, advance=1, rate=f"{fetcher.samples / elapsed:,.0f} samples/s")
            if after_window is not None:
                after_window(i, we)
        fill_unknown_gpus(wh, cluster.name, windows[0][0], windows[-1][1])
        result.written = written
        result.note = (
            f"{len(windows)} window(s) to {end.isoformat()}, {fetcher.samples:,} samples fetched "
            f"in {client.requests_made} request(s)"
        ) + telemetry_note(chosen, how, left_out)
        if placer is not None:
            result.note += placer.note()
        if not seen & {*ALL_GPU_METRICS, *HOST_METRICS}:  # not an error: data may come later
            result.note += f"; {_nothing_to_read(client, inner, src.label_filter, start, end)}"
    return result


def run_prometheus(settings: Settings, cluster: ClusterConfig, options: RunOptions) -> IngestResult:
    """The configured server of `cluster` over the run's window (its runner in `ingest.sources`)."""
    return ingest_prometheus(
        settings,
        cluster,
        since=options.since,
        until=options.until,
        quiet=options.quiet,
        telemetry=options.telemetry,
    )


def _dialects(
    client: PrometheusClient, inner: str, named: str | None, start: datetime, end: datetime
) -> list[Dialect]:
    """The dialects to read over [start, end): the named one, else those whose series the
    server holds (`dialect_choice.choose`). A named dialect absent while the server holds
    another's GPU series is one sentence, before anything is written; with no GPU series at
    all the run goes on (its note says what the server holds)."""
    held = client.metric_names(_names_match(ALL_GPU_METRICS, inner), start, end)
    try:
        return choose(named, held)
    except DialectAbsent as exc:
        if not held:
            return [dialect(named)] if named else []
        raise IngestError(f"Prometheus at {client.url} {exc}; nothing was written.") from None


def _names_match(names: tuple[str, ...], inner: str) -> str:
    """`{__name__=~"a|b",<label filter>}`: the series of these metrics that the filter keeps."""
    return "{" + ",".join(p for p in (f'__name__=~"{_names_regex(names)}"', inner) if p) + "}"


def _nothing_to_read(
    client: PrometheusClient, inner: str, label_filter: str, start: datetime, end: datetime
) -> str:
    """Why a run found no series to read: what the server holds instead (one more request)."""
    names = client.metric_names("{" + (inner or '__name__=~".+"') + "}", start, end)
    where = f"Prometheus at {client.url} has no series"
    span = f"{' matching ' + label_filter if inner else ''} between {start.isoformat()} and "
    span += end.isoformat()
    if not names:
        return f"{where} at all{span}"
    return f"{where} gpuwaste reads{span}, only {none_read(sorted(names))}"


def _batch_window(batch: str) -> tuple[datetime, datetime] | None:
    try:
        a, b = batch.split("/", 1)
        return datetime.fromisoformat(a), datetime.fromisoformat(b)
    except ValueError:
        return None


def _write_window_quarantine(
    wh: Warehouse, cluster: str, start: datetime, end: datetime, refused: list[Refused]
) -> None:
    """Replace the refused records of [start, end): also those of earlier runs whose windows
    overlap it (a re-run with other window edges must not list a record twice)."""
    batch = f"{start.isoformat()}/{end.isoformat()}"
    stored = wh.read("quarantine", cluster, QUARANTINE_KEY)
    stored = stored.filter(pl.col("source") == SOURCE)
    stale = []
    for other in stored["batch"].unique().to_list():
        bounds = _batch_window(other)
        if other != batch and bounds is not None and bounds[0] < end and bounds[1] > start:
            stale.append(other)
    if stale:
        match = (pl.col("source") == SOURCE) & pl.col("batch").is_in(stale)
        wh.replace_rows_where("quarantine", cluster, QUARANTINE_KEY, match, stored.clear())
    write_quarantine(wh, cluster, SOURCE, batch, refused)


def _write_jobs(
    wh: Warehouse,
    cluster: str,
    gpu: pl.DataFrame,
    kube_sets: dict[str, SeriesSet],
    src: PrometheusSource,
    newest: datetime,
    slack: timedelta,
    kube_on: bool,
) -> None:
    """Fold this window's GPU spans (and pods) into the stored job_gpus and jobs."""
    spans_new = telemetry_jobs.spans_from_samples(gpu, src.scrape_interval_s)
    touched = set(spans_new["job_id"].to_list())
    if spans_new.height:
        stored = wh.read("job_gpus", cluster, SPANS_KEY)
        merged = telemetry_jobs.merge_spans(stored, spans_new)
        wh.replace_file("job_gpus", cluster, SPANS_KEY, merged)
    else:
        merged = wh.read("job_gpus", cluster, SPANS_KEY)
    if kube_on:
        jobs = kube.pods_to_jobs(kube_sets, src.kubernetes, newest=newest, running_slack=slack)
        if jobs.height:
            stored_jobs = wh.read("jobs", cluster, KUBE_KEY)
            wh.upsert("jobs", cluster, KUBE_KEY, kube.merge_jobs(stored_jobs, jobs))
        return
    # Telemetry jobs: recompute the jobs seen now, and close those that stopped being seen.
    stored_jobs = wh.read("jobs", cluster, TELEMETRY_KEY)
    open_ids = set(stored_jobs.filter(pl.col("state") == "running")["job_id"].to_list())
    ids = touched | open_ids
    if not ids:
        return
    spans = merged.filter(pl.col("job_id").is_in(list(ids)))
    jobs = telemetry_jobs.jobs_from_spans(
        spans, newest=newest, running_slack=slack, source=TELEMETRY_KEY
    )
    wh.upsert("jobs", cluster, TELEMETRY_KEY, jobs)
