"""The exporter's figures as Prometheus metric families: pure, no I/O.

Every name is declared once in METRICS (name -> help), which docs/exporter.md lists and the
Grafana dashboard's test reads from a live exporter. Everything is in Prometheus' base units
(`promtool check metrics` is clean): GPU time in GPU seconds, served as counters that only grow
(`gpuwaste_gpu_seconds_total{kind}`, so `increase()` and `rate()` work over any window), and as
trailing windows of the data only where a counter cannot serve: a window ending at the cluster's
newest data, whatever the scrape time, for the waste share and the alert's volume gate when data
arrives in batches or late. Times are Unix timestamps in seconds.
Money is in the configured `[cost] currency`, named by the `currency` label: a currency has no
Prometheus base unit, and a label keeps the name (and every rule and panel) the same whatever
the currency; one exporter serves one currency, so a sum never mixes two.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

import polars as pl
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from gpuwaste.exporter.figures import Figures

WINDOW_LABELS = ["cluster", "vc", "window"]
JOB_LABELS = ["cluster", "job_id", "user", "vc"]
# the kinds of GPU time, each a column of gpu_seconds.sql and, as `<kind>_gpu_h`, of
# window_hours.sql (hours are the analyses' unit; served here in seconds)
GPU_TIME_KINDS: dict[str, str] = {
    "allocated": "allocated to jobs",
    "busy": "allocated and not idle (data present)",
    "idle_slot": "in idle slots of jobs",
    "never_used": "on GPUs their job never used",
    "missing": "allocated without telemetry",
    "debug": "held by debugging jobs",
}
KINDS_HELP = "; ".join(f"{kind}: {text}" for kind, text in GPU_TIME_KINDS.items())
# the kinds of energy, each a column `<kind>_j` of gpu_seconds.sql
ENERGY_KINDS: dict[str, str] = {
    "used": "drawn by the GPUs of jobs",
    "lost": "drawn in idle slots and on never-used GPUs",
}
WINDOW_SUFFIX = ", per cluster and VC over the trailing window ending at the cluster's newest data."

METRICS: dict[str, str] = {
    "gpuwaste_up": "1 when the figures were read from the warehouse, 0 when it is missing, empty "
    "or unreadable (the exporter's log says why).",
    "gpuwaste_figures_computed_timestamp_seconds": "When the figures served were read from the "
    "warehouse (they are read at most once per cache_seconds).",
    "gpuwaste_update_interval_seconds": "How often ingest and analyze are scheduled "
    "([exporter] update_interval_s); the staleness alerts fire after 3 of these.",
    # a counter's name without `_total`: prometheus_client appends it to the sample
    "gpuwaste_gpu_seconds": "GPU seconds of every settled GPU row of the results (its job ended "
    "an hour of data ago), per cluster, VC and kind ("
    + KINDS_HELP
    + "); a counter: it grows as analyze settles rows (docs/exporter.md says when it can fall).",
    "gpuwaste_energy_joules": "Joules of every settled GPU row of the results, per cluster, VC "
    "and kind ("
    + "; ".join(f"{kind}: {text}" for kind, text in ENERGY_KINDS.items())
    + "); a counter, as gpuwaste_gpu_seconds_total; no series where no GPU has power readings.",
    "gpuwaste_window_gpu_seconds": "GPU seconds per kind (as gpuwaste_gpu_seconds_total)"
    + WINDOW_SUFFIX,
    "gpuwaste_waste_ratio": "Share of allocated GPU time lost to idle slots and never-used GPUs"
    + WINDOW_SUFFIX,
    "gpuwaste_wasted_money": "Money lost to idle slots and never-used GPUs (their GPU hours x "
    "the [cost] price of each GPU's model, a MIG instance by its slice), in the currency of the "
    "currency label; only for VCs with priced GPUs" + WINDOW_SUFFIX,
    "gpuwaste_idle_job_idle_seconds": "How long a running job has been idle on all its GPUs, up "
    'to the newest data; the top jobs by idle GPU hours, the rest as job_id="(other)" (its '
    "longest).",
    "gpuwaste_idle_job_gpus": 'GPUs held by a running job idle on all its GPUs (job_id="(other)": '
    "summed over the jobs beyond the top N).",
    "gpuwaste_idle_jobs": "Running jobs idle on all their GPUs, per cluster (all of them, not only "
    "the top N).",
    "gpuwaste_last_ingest_timestamp_seconds": "When a source of a cluster was last ingested "
    "successfully.",
    "gpuwaste_ingest_data_until_timestamp_seconds": "How far a source's ingested data reaches "
    "(its watermark).",
    "gpuwaste_last_analyze_timestamp_seconds": "When gpuwaste analyze last finished a cluster "
    "(analyze runs per cluster: the series has no source label).",
    "gpuwaste_results_stale": "1 when a cluster's results are older than its data (never "
    "analyzed, samples newer than the results, or ingested after the last analyze).",
    "gpuwaste_quarantined_records": "Input records refused by ingest, per cluster and source.",
    "gpuwaste_data_until_timestamp_seconds": "The newest data of a cluster's results: where its "
    "trailing windows end.",
    "gpuwaste_warehouse_age_seconds": "Seconds from a cluster's newest data (newest GPU sample, "
    "else newest ingest watermark) to the scrape.",
}


# the counter families: their samples (and Prometheus' series) are named `<family>_total`
COUNTERS = frozenset({"gpuwaste_gpu_seconds", "gpuwaste_energy_joules"})
SERIES_NAMES = frozenset(f"{n}_total" if n in COUNTERS else n for n in METRICS)


def _gauge(name: str, labels: list[str] | None = None) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, METRICS[name], labels=labels)


def _epoch(ts: datetime | None) -> float | None:
    return None if ts is None else ts.timestamp()


def _total_families(totals: pl.DataFrame) -> Iterator[Metric]:
    counter = CounterMetricFamily(
        "gpuwaste_gpu_seconds", METRICS["gpuwaste_gpu_seconds"], labels=["cluster", "vc", "kind"]
    )
    for row in totals.iter_rows(named=True):
        for kind in GPU_TIME_KINDS:
            counter.add_metric([row["cluster"], row["vc"], kind], float(row[kind]))
    yield counter
    energy = CounterMetricFamily(
        "gpuwaste_energy_joules",
        METRICS["gpuwaste_energy_joules"],
        labels=["cluster", "vc", "kind"],
    )
    for row in totals.iter_rows(named=True):
        for kind in ENERGY_KINDS:
            if row[f"{kind}_j"] is not None:
                energy.add_metric([row["cluster"], row["vc"], kind], float(row[f"{kind}_j"]))
    yield energy


def _window_families(windows: pl.DataFrame, currency: str) -> Iterator[Metric]:
    seconds = _gauge("gpuwaste_window_gpu_seconds", [*WINDOW_LABELS, "kind"])
    for row in windows.iter_rows(named=True):
        for kind in GPU_TIME_KINDS:
            labels = [row["cluster"], row["vc"], row["window"], kind]
            seconds.add_metric(labels, float(row[f"{kind}_gpu_h"]) * 3600)
    yield seconds
    ratio = _gauge("gpuwaste_waste_ratio", WINDOW_LABELS)
    for row in windows.iter_rows(named=True):
        if row["allocated_gpu_h"] > 0:
            lost = row["idle_slot_gpu_h"] + row["never_used_gpu_h"]
            ratio.add_metric(
                [row["cluster"], row["vc"], row["window"]], lost / row["allocated_gpu_h"]
            )
    yield ratio
    money = _gauge("gpuwaste_wasted_money", [*WINDOW_LABELS, "currency"])
    for row in windows.iter_rows(named=True):
        if row["wasted_money"] is not None:
            labels = [row["cluster"], row["vc"], row["window"], currency]
            money.add_metric(labels, float(row["wasted_money"]))
    yield money


def _idle_job_families(figs: Figures) -> Iterator[Metric]:
    idle_s = _gauge("gpuwaste_idle_job_idle_seconds", JOB_LABELS)
    gpus = _gauge("gpuwaste_idle_job_gpus", JOB_LABELS)
    for row in figs.idle_jobs.iter_rows(named=True):
        labels = [row["cluster"], row["job_id"], row["user"] or "", row["vc"] or ""]
        idle_s.add_metric(labels, row["idle_s"])
        gpus.add_metric(labels, float(row["gpus"]))
    count = _gauge("gpuwaste_idle_jobs", ["cluster"])
    idle_clusters = dict(figs.idle_counts.iter_rows())
    for cluster in figs.data_until["cluster"].sort():
        count.add_metric([cluster], float(idle_clusters.get(cluster, 0)))
    yield from (idle_s, gpus, count)


def _health_families(figs: Figures, now: float) -> Iterator[Metric]:
    ingested = _gauge("gpuwaste_last_ingest_timestamp_seconds", ["cluster", "source"])
    until = _gauge("gpuwaste_ingest_data_until_timestamp_seconds", ["cluster", "source"])
    analyzed = _gauge("gpuwaste_last_analyze_timestamp_seconds", ["cluster"])
    stale = _gauge("gpuwaste_results_stale", ["cluster"])
    age = _gauge("gpuwaste_warehouse_age_seconds", ["cluster"])
    per_source = figs.freshness.filter(pl.col("source").is_not_null())
    for row in per_source.iter_rows(named=True):
        for g, col in ((ingested, "ingested_at"), (until, "watermark")):
            value = _epoch(row[col])
            if value is not None:
                g.add_metric([row["cluster"], row["source"]], value)
    per_cluster = figs.freshness.group_by("cluster", maintain_order=True).agg(
        pl.col("analyzed_at").first(),
        pl.col("stale").first(),
        newest=pl.coalesce(pl.col("samples_newest").first(), pl.col("watermark").max()),
    )
    for row in per_cluster.iter_rows(named=True):
        if (value := _epoch(row["analyzed_at"])) is not None:
            analyzed.add_metric([row["cluster"]], value)
        stale.add_metric([row["cluster"]], float(row["stale"]))
        if (value := _epoch(row["newest"])) is not None:
            age.add_metric([row["cluster"]], max(now - value, 0.0))
    quarantined = _gauge("gpuwaste_quarantined_records", ["cluster", "source"])
    for cluster, source, n in figs.quarantine.iter_rows():
        quarantined.add_metric([cluster, source], float(n))
    data_until = _gauge("gpuwaste_data_until_timestamp_seconds", ["cluster"])
    for cluster, ts in figs.data_until.sort("cluster").iter_rows():
        if (value := _epoch(ts)) is not None:
            data_until.add_metric([cluster], value)
    yield from (ingested, until, analyzed, stale, quarantined, data_until, age)


def families(
    figs: Figures | None, now: float, update_interval_s: float, currency: str = "USD"
) -> list[Metric]:
    """The metric families of one scrape: `gpuwaste_up` and the interval always, the rest only
    when there are figures (None: the warehouse could not be read). `now` is the scrape's Unix
    time, for the warehouse's age; `currency` labels the money (`[cost] currency`)."""
    up = _gauge("gpuwaste_up")
    up.add_metric([], 0.0 if figs is None else 1.0)
    interval = _gauge("gpuwaste_update_interval_seconds")
    interval.add_metric([], update_interval_s)
    out: list[Metric] = [up, interval]
    if figs is None:
        return out
    computed = _gauge("gpuwaste_figures_computed_timestamp_seconds")
    computed.add_metric([], figs.computed_at.timestamp())
    out.append(computed)
    out.extend(_total_families(figs.totals))
    out.extend(_window_families(figs.windows, currency))
    out.extend(_idle_job_families(figs))
    out.extend(_health_families(figs, now))
    return out
