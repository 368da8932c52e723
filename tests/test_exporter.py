"""`gpuwaste exporter` on a hand-built warehouse with hand-computed answers: the window hours per
VC, the idle running jobs cut to the top N plus "(other)", the pipeline's health, the cache, a
missing or empty warehouse, and the HTTP server on loopback (prometheus_client's own parser
reads what it serves).

Rows are written through Warehouse.replace_file, as `gpuwaste analyze` does. Cluster c1 holds
the jobs whose GPU hours are hand-summed below (its newest data, T, is where its windows end);
cluster c2 holds two more idle running jobs, for the top-N cut.
"""

from __future__ import annotations

import logging
import math
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl
import pytest
import requests
from harness.components import free_port, require
from prometheus_client.parser import text_string_to_metric_families

from gpuwaste.analyses import reads, state
from gpuwaste.config import ConfigError, parse_settings
from gpuwaste.exporter.collector import WasteCollector
from gpuwaste.exporter.figures import OTHER_JOBS, read_figures
from gpuwaste.exporter.metrics import METRICS
from gpuwaste.exporter.server import start
from gpuwaste.warehouse.bookkeeping import Refused, set_watermark, write_quarantine
from gpuwaste.warehouse.catalog import refresh_catalog
from gpuwaste.warehouse.readonly import read_only_connection
from gpuwaste.warehouse.store import Warehouse

T = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)  # c1's and c2's newest data
H = timedelta(hours=1)
D = timedelta(days=1)

# job -> (vc, debug, running, [(start, end, missing_s, never_used, [(slot start, slot end)])])
Alloc = tuple[datetime, datetime, float, bool, list[tuple[datetime, datetime]]]
C1: dict[str, tuple[str, bool, bool, list[Alloc]]] = {
    # running; idle since T - 30 min (to the end), and an idle hour 5 h ago
    "A": ("nlp", False, True, [(T - 10 * H, T, 0, False, [(T - 5 * H, T - 4 * H), (T - H / 2, T)])]),
    # debugging, ended an hour ago: one GPU never used, one half without data
    "B": ("nlp", True, False, [(T - 2 * H, T - H, 0, True, []), (T - 2 * H, T - H, 1800, False, [])]),
    # across the 24 h edge: 12 h allocated, 10 % without data, an idle hour inside the 24 h
    "C": ("vision", False, False, [(T - 30 * H, T - 18 * H, 4320, False, [(T - 20 * H, T - 19 * H)])]),
    # across the 7 d edge: one hour inside, with half of its idle slot
    "D": ("vision", False, False, [(T - 7 * D - H, T - 7 * D + H, 0, False, [(T - 7 * D - H / 2, T - 7 * D + H / 2)])]),
    # before every window
    "E": ("vision", False, False, [(T - 9 * D, T - 8 * D, 0, False, [])]),
}  # fmt: skip
C2: dict[str, tuple[str, bool, bool, list[Alloc]]] = {
    # two GPUs idle to the end since T - 3 h and T - 2 h: all idle since T - 2 h, 5 idle GPU hours
    "F": ("nlp", False, True, [(T - 4 * H, T, 0, False, [(T - 3 * H, T)]),
                               (T - 4 * H, T, 0, False, [(T - 2 * H, T)])]),
    # one GPU, never used, running for an hour: 1 idle GPU hour
    "G": ("speech", False, True, [(T - H, T, 0, True, [])]),
}  # fmt: skip

# c1, hand-summed (GPU hours): vc -> window -> (allocated, busy, idle slot, never used, missing,
# debug). nlp: A 10 h (1.5 idle), B 2 GPU h (1 never used, 0.5 no data, debug). vision: C 6 h of
# its 12 in the 24 h window (0.6 no data, 1 idle), all 12 in 7 d (1.2 no data); D 1 h in 7 d
# (0.5 idle); E outside.
EXPECTED: dict[str, dict[str, tuple[float, ...]]] = {
    "nlp": {
        "1h": (1, 0.5, 0.5, 0, 0, 0),
        "24h": (12, 9, 1.5, 1, 0.5, 2),
        "7d": (12, 9, 1.5, 1, 0.5, 2),
    },
    "vision": {
        "1h": (0, 0, 0, 0, 0, 0),
        "24h": (6, 4.4, 1, 0, 0.6, 0),
        "7d": (13, 10.3, 1.5, 0, 1.2, 0),
    },
}
# c1's GPUs are priced (gpu_cost, lost_cost as `[cost]` makes them), c2's are not: money wasted
# (idle slot + never used GPU hours x the price) per VC and window, hand-computed from EXPECTED.
PRICE = 2.0  # per GPU hour
MONEY = {"nlp": {"1h": 1.0, "24h": 5.0, "7d": 5.0}, "vision": {"1h": 0.0, "24h": 2.0, "7d": 3.0}}
PRICES = {"c1": PRICE, "c2": None}

# Untrusted text in a label value: quotes, a backslash, a newline, an escape sequence, HTML.
NASTY_USER = '<b>m"al\\lory</b>\n\x1b[31m'
USERS = {"G": NASTY_USER}
KINDS = ("allocated", "busy", "idle_slot", "never_used", "missing", "debug")


def _rows(
    cluster: str, plant: dict[str, tuple[str, bool, bool, list[Alloc]]], price: float | None
) -> dict[str, pl.DataFrame]:
    jobs: list[dict[str, Any]] = []
    gpus: list[dict[str, Any]] = []
    slots: list[dict[str, Any]] = []
    for job, (vc, debug, running, allocs) in plant.items():
        start = min(a[0] for a in allocs)
        end = max(a[1] for a in allocs)
        jobs.append({"job_id": job, "user": USERS.get(job, f"u-{job}"), "vc": vc, "name": job, "gpus": len(allocs),
                     "running": running, "state": "running" if running else "passed",
                     "is_debug": debug, "size_class": "1", "start_ts": start,
                     "end_ts": None if running else end})  # fmt: skip
        for gpu, (a, b, missing, never, spans) in enumerate(allocs):
            alloc = (b - a).total_seconds()
            idle = sum((y - x).total_seconds() for x, y in spans)
            never_s = alloc - missing if never else 0.0
            cost = lambda s: None if price is None else s / 3600 * price  # noqa: E731
            gpus.append({"job_id": job, "attempt": 0, "host": f"h-{job}", "gpu": gpu,
                         "start_ts": a, "end_ts": b, "alloc_s": alloc, "missing_s": float(missing),
                         "never_used": never, "never_used_s": never_s, "idle_slot_s": idle,
                         "gpu_cost": cost(alloc), "lost_cost": cost(idle + never_s),
                         # c1's GPUs draw 500 W, 100 W when lost; c2 has no power readings
                         "energy_kwh": None if price is None else alloc / 3600 * 0.5,
                         "lost_energy_kwh": None if price is None else (idle + never_s) / 3600 * 0.1,
                         })  # fmt: skip
            slots.extend({"job_id": job, "attempt": 0, "host": f"h-{job}", "gpu": gpu,
                          "start_ts": x, "end_ts": y, "duration_s": (y - x).total_seconds()}
                         for x, y in spans)  # fmt: skip
    return {
        "job_usage": pl.DataFrame(jobs),
        "job_gpu_usage": pl.DataFrame(gpus),
        "idle_slots": pl.DataFrame(slots),
    }


def build(data_dir: Path) -> None:
    wh = Warehouse(data_dir)
    for cluster, plant in (("c1", C1), ("c2", C2)):
        for table, rows in _rows(cluster, plant, PRICES[cluster]).items():
            wh.replace_file(table, cluster, "built", rows)
    set_watermark(wh, "c1", "slurm", T - 15 * timedelta(seconds=60))
    refused = [Refused("sacct.txt:3", "unparseable time", "x"), Refused("sacct.txt:9", "bad", "y")]
    write_quarantine(wh, "c1", "slurm", "b1", refused)
    fingerprints = data_dir / "fingerprints.parquet"
    pl.DataFrame({"job_id": ["A"]}).write_parquet(fingerprints)
    state.save(
        data_dir,
        "c1",
        state.AnalyzeState(ran_at=(T + H).isoformat(), samples_until=T.isoformat()),
        fingerprints,
        [],
    )
    fingerprints.unlink()
    refresh_catalog(data_dir, force=True)


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("exporter") / "data"
    build(d)
    return d


@contextmanager
def serving(collector: WasteCollector) -> Iterator[str]:
    """The exporter's HTTP server on a free loopback port; yields the /metrics URL."""
    httpd = start(collector, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{httpd.server_port}/metrics"
    finally:
        httpd.shutdown()
        httpd.server_close()


def scrape_text(collector: WasteCollector) -> str:
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry()
    registry.register(collector)
    return generate_latest(registry).decode()


def samples(text: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """metric name -> sorted labels -> value, from the text exposition format."""
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def value(
    got: dict[str, dict[tuple[tuple[str, str], ...], float]], name: str, **labels: str
) -> float:
    return got[name][tuple(sorted(labels.items()))]


# ------------------------------------------------------------------------------------ figures
def test_window_hours_per_vc_are_the_hand_sums(planted: Path) -> None:
    figs = read_figures(planted, 50, T)
    c1 = figs.windows.filter(pl.col("cluster") == "c1")
    assert sorted(c1["vc"].unique()) == ["nlp", "vision"]  # E, outside every window, adds no VC
    for row in c1.iter_rows(named=True):
        want = EXPECTED[row["vc"]][row["window"]]
        got = tuple(row[f"{k}_gpu_h"] for k in KINDS)
        assert got == pytest.approx(want, abs=1e-9), (row["vc"], row["window"])
    assert c1.height == 6


def test_the_metrics_carry_the_window_hours_and_the_waste_ratio(planted: Path) -> None:
    got = samples(scrape_text(WasteCollector(planted)))
    assert value(got, "gpuwaste_up") == 1
    for vc, windows in EXPECTED.items():
        for window, want in windows.items():
            for kind, hours in zip(KINDS, want, strict=True):
                name, labels = "gpuwaste_window_gpu_seconds", {"vc": vc, "window": window}
                got_s = value(got, name, cluster="c1", kind=kind, **labels)
                assert got_s == pytest.approx(hours * 3600)
    # lost (idle slot + never used) / allocated; no ratio where nothing was allocated
    ratio = "gpuwaste_waste_ratio"
    assert value(got, ratio, cluster="c1", vc="nlp", window="24h") == pytest.approx(2.5 / 12)
    assert value(got, ratio, cluster="c1", vc="vision", window="7d") == pytest.approx(1.5 / 13)
    assert (("cluster", "c1"), ("vc", "vision"), ("window", "1h")) not in got[ratio]


# c1's GPU hours over the settled rows (ended an hour or more before T, the newest sample analyze
# saw), hand-summed: nlp is B (A runs); vision is C 12 h (1.2 no data, 1 idle), D 2 h (1 idle),
# E 24 h.
TOTALS = {
    "nlp": (2, 0.5, 0, 1, 0.5, 2),
    "vision": (38, 34.8, 2, 0, 1.2, 0),
}


def test_the_gpu_seconds_counters_are_the_hand_sums_over_the_settled_results(planted: Path) -> None:
    got = samples(scrape_text(WasteCollector(planted)))
    counter = got["gpuwaste_gpu_seconds_total"]
    for vc, want in TOTALS.items():
        for kind, hours in zip(KINDS, want, strict=True):
            labels = (("cluster", "c1"), ("kind", kind), ("vc", vc))
            assert counter[labels] == pytest.approx(hours * 3600), (vc, kind)


def test_the_energy_counters_are_the_hand_sums_in_joules(planted: Path) -> None:
    """c1: 0.5 kWh per GPU hour allocated, 0.1 per GPU hour lost; c2 has no power: no series."""
    got = samples(scrape_text(WasteCollector(planted)))["gpuwaste_energy_joules_total"]
    want = {}
    for vc, (alloc_h, _, idle_h, never_h, _, _) in TOTALS.items():
        want[(("cluster", "c1"), ("kind", "used"), ("vc", vc))] = alloc_h * 0.5 * 3.6e6
        want[(("cluster", "c1"), ("kind", "lost"), ("vc", vc))] = (idle_h + never_h) * 0.1 * 3.6e6
    assert got == pytest.approx(want)


def test_the_scrape_passes_promtool_check_metrics(planted: Path) -> None:
    """Prometheus' own linter: base units, counters named `_total`, help on every family."""
    text = scrape_text(WasteCollector(planted, currency="EUR"))
    done = subprocess.run(
        [require("promtool"), "check", "metrics"], input=text, capture_output=True, text=True
    )
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


def test_the_money_wasted_per_vc_and_window_in_the_configured_currency(planted: Path) -> None:
    got = samples(scrape_text(WasteCollector(planted, currency="EUR")))
    money = got["gpuwaste_wasted_money"]
    want = {
        (("cluster", "c1"), ("currency", "EUR"), ("vc", vc), ("window", window)): value
        for vc, windows in MONEY.items()
        for window, value in windows.items()
    }
    assert money == pytest.approx(want)  # c2 has no price: no series for it


def test_the_money_exported_equals_the_warehouses(planted: Path) -> None:
    """nlp's jobs A and B lie wholly inside the 7 d window: its money there is the sum of their
    stored lost_cost."""
    got = samples(scrape_text(WasteCollector(planted)))
    lost = Warehouse(planted).read("job_gpu_usage", "c1").filter(pl.col("job_id").is_in(["A", "B"]))
    stored = lost["lost_cost"].sum()
    assert stored == pytest.approx(PRICE * 2.5)
    exported = value(got, "gpuwaste_wasted_money", cluster="c1", vc="nlp", window="7d",
                     currency="USD")  # fmt: skip
    assert exported == pytest.approx(stored)


def test_a_mig_instance_counts_its_slice_of_gpu_hours_and_money(tmp_path: Path) -> None:
    """A real analyze with `[cost]` prices: a 1g.10gb instance (1/7 of an A100 at 7.0 per GPU
    hour) busy for an hour but a 10-minute idle slot, and a whole A100 busy for an hour. The
    windows and the counters weigh the instance by its slice, as job_gpu_usage does, and its money is its
    lost_cost: 10 min x 1/7 x 7.0 = 1/6."""
    from tests.test_mig import _priced_cluster

    _priced_cluster(tmp_path, {"*A100*": 7.0}, settled=True)
    got = samples(scrape_text(WasteCollector(tmp_path, currency="EUR")))
    labels = {"cluster": "c", "vc": "v", "window": "7d"}
    window = "gpuwaste_window_gpu_seconds"
    assert value(got, window, kind="allocated", **labels) == pytest.approx(3600 * (1 + 1 / 7))
    assert value(got, window, kind="idle_slot", **labels) == pytest.approx(3600 / 42)
    total = "gpuwaste_gpu_seconds_total"
    assert value(got, total, cluster="c", vc="v", kind="allocated") == pytest.approx(3600 * 8 / 7)
    money = value(got, "gpuwaste_wasted_money", **labels, currency="EUR")
    assert money == pytest.approx(1 / 6, abs=1e-6)
    stored = Warehouse(tmp_path).read("job_usage", "c")["lost_cost"].sum()
    assert money == pytest.approx(stored, abs=1e-6)


def test_without_prices_no_money_series(tmp_path: Path) -> None:
    from tests.test_mig import _priced_cluster

    _priced_cluster(tmp_path, {}, settled=True)
    got = samples(scrape_text(WasteCollector(tmp_path)))
    assert value(got, "gpuwaste_gpu_seconds_total", cluster="c", vc="v", kind="allocated") > 3600
    assert "gpuwaste_wasted_money" not in got


def test_idle_running_jobs_are_the_top_n_and_one_other_series_per_cluster(planted: Path) -> None:
    # by idle GPU hours: F (c2, 5), G (c2, 1), A (c1, 0.5)
    got = samples(scrape_text(WasteCollector(planted, top_jobs=1)))
    idle = got["gpuwaste_idle_job_idle_seconds"]
    gpus = got["gpuwaste_idle_job_gpus"]
    f = (("cluster", "c2"), ("job_id", "F"), ("user", "u-F"), ("vc", "nlp"))
    assert idle[f] == 2 * 3600 and gpus[f] == 2
    other_c1 = (("cluster", "c1"), ("job_id", OTHER_JOBS), ("user", ""), ("vc", ""))
    other_c2 = (("cluster", "c2"), ("job_id", OTHER_JOBS), ("user", ""), ("vc", ""))
    assert idle[other_c1] == 1800 and gpus[other_c1] == 1  # A
    assert idle[other_c2] == 3600 and gpus[other_c2] == 1  # G
    assert set(idle) == {f, other_c1, other_c2}
    assert value(got, "gpuwaste_idle_jobs", cluster="c1") == 1
    assert value(got, "gpuwaste_idle_jobs", cluster="c2") == 2


def test_every_idle_job_has_its_own_series_within_the_top_n(planted: Path) -> None:
    got = samples(scrape_text(WasteCollector(planted, top_jobs=50)))
    idle = {dict(k)["job_id"]: v for k, v in got["gpuwaste_idle_job_idle_seconds"].items()}
    assert idle == {"F": 7200, "G": 3600, "A": 1800}
    gpus = {dict(k)["job_id"]: v for k, v in got["gpuwaste_idle_job_gpus"].items()}
    assert gpus == {"F": 2, "G": 1, "A": 1}
    users = {dict(k)["job_id"]: dict(k)["user"] for k in got["gpuwaste_idle_job_gpus"]}
    assert users["G"] == NASTY_USER  # escaped in the text format, read back intact


def test_no_idle_job_gives_no_idle_job_series(planted: Path) -> None:
    from gpuwaste.exporter.figures import top_idle_jobs

    con = read_only_connection(planted)
    try:
        none = reads.idle_now(con, "u.cluster = ?", ["no-such-cluster"])
    finally:
        con.close()
    assert top_idle_jobs(none, 0).height == 0
    assert top_idle_jobs(none, 50).height == 0


def test_pipeline_health(planted: Path) -> None:
    before = datetime.now(UTC).timestamp()
    now = T + 2 * H
    got = samples(scrape_text(WasteCollector(planted, clock=now.timestamp)))
    c1_slurm = {"cluster": "c1", "source": "slurm"}
    assert (
        value(got, "gpuwaste_ingest_data_until_timestamp_seconds", **c1_slurm)
        == (T - 15 * timedelta(seconds=60)).timestamp()
    )
    ingested = value(got, "gpuwaste_last_ingest_timestamp_seconds", **c1_slurm)
    assert before - 600 < ingested <= datetime.now(UTC).timestamp()  # written by build()
    assert value(got, "gpuwaste_quarantined_records", **c1_slurm) == 2
    assert (
        value(got, "gpuwaste_last_analyze_timestamp_seconds", cluster="c1") == (T + H).timestamp()
    )
    assert ("cluster", "c2") not in {k[0] for k in got["gpuwaste_last_analyze_timestamp_seconds"]}
    assert value(got, "gpuwaste_data_until_timestamp_seconds", cluster="c1") == T.timestamp()
    # no GPU samples in this warehouse: the age counts from the newest ingest watermark
    assert value(got, "gpuwaste_warehouse_age_seconds", cluster="c1") == pytest.approx(
        (2 * H + 15 * timedelta(seconds=60)).total_seconds()
    )
    assert value(got, "gpuwaste_update_interval_seconds") == 300
    assert value(got, "gpuwaste_figures_computed_timestamp_seconds") == now.timestamp()


def test_every_metric_served_is_declared_with_its_help(planted: Path) -> None:
    text = scrape_text(WasteCollector(planted))
    names = {f.name for f in text_string_to_metric_families(text)}
    assert names == set(METRICS)
    docs = (Path(__file__).resolve().parent.parent / "docs" / "exporter.md").read_text()
    assert all(f"`{name}`" in docs for name in METRICS), "docs/exporter.md lists every metric"


# ------------------------------------------------------------------------------------ cache
class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_the_figures_are_read_at_most_once_per_cache_seconds(planted: Path) -> None:
    clock = Clock(T.timestamp())
    c = WasteCollector(planted, cache_seconds=60, clock=clock)
    for _ in range(5):
        scrape_text(c)
        clock.t += 10  # 5 scrapes in 40 s
    c.wait()
    assert c.reads == 1
    clock.t = T.timestamp() + 60
    first = samples(scrape_text(c))  # expired: answered from the figures it has, read behind
    c.wait()
    assert c.reads == 2
    assert value(first, "gpuwaste_figures_computed_timestamp_seconds") == T.timestamp()
    again = samples(scrape_text(c))
    assert value(again, "gpuwaste_figures_computed_timestamp_seconds") == T.timestamp() + 60
    c.wait()
    assert c.reads == 2


def test_a_read_started_at_start_serves_the_first_scrape(planted: Path) -> None:
    c = WasteCollector(planted, cache_seconds=60, clock=Clock(T.timestamp()))
    c.start_reading()  # what `gpuwaste exporter` does when it starts
    got = samples(scrape_text(c))  # waits for that read instead of reading again
    assert value(got, "gpuwaste_up") == 1
    assert c.reads == 1


def test_closing_waits_for_the_running_read_and_starts_no_other(planted: Path) -> None:
    c = WasteCollector(planted, cache_seconds=0, clock=Clock(T.timestamp()))
    c.start_reading()
    assert c.close(60)
    assert not c.reading_in_background and c.reads == 1
    c.start_reading()  # a scrape of a closed exporter does not start another
    assert not c.reading_in_background and c.reads == 1


def test_concurrent_first_scrapes_read_the_figures_once(planted: Path) -> None:
    c = WasteCollector(planted, cache_seconds=60, clock=Clock(T.timestamp()))
    with ThreadPoolExecutor(4) as pool:
        texts = list(pool.map(lambda _: scrape_text(c), range(4)))
    assert all(value(samples(t), "gpuwaste_up") == 1 for t in texts)
    assert c.reads == 1


# ------------------------------------------------------------------------------------ no data
def test_a_missing_warehouse_gives_up_0_and_one_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock(0.0)
    c = WasteCollector(tmp_path / "nowhere", cache_seconds=0, clock=clock)
    with caplog.at_level(logging.WARNING, logger="gpuwaste.exporter"):
        for _ in range(3):
            got = samples(scrape_text(c))
            c.wait()
            clock.t += 1
    assert value(got, "gpuwaste_up") == 0
    assert set(got) == {"gpuwaste_up", "gpuwaste_update_interval_seconds"}
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        f"serving gpuwaste_up 0: no warehouse at {tmp_path / 'nowhere'}: run `gpuwaste ingest` "
        "then `gpuwaste analyze` (or `gpuwaste demo`)."
    ]


def test_an_empty_warehouse_then_results_arriving(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    d = tmp_path / "data"
    d.mkdir()
    clock = Clock(T.timestamp())
    c = WasteCollector(d, cache_seconds=0, clock=clock)
    with caplog.at_level(logging.WARNING, logger="gpuwaste.exporter"):
        assert value(samples(scrape_text(c)), "gpuwaste_up") == 0
        build(d)
        scrape_text(c)  # expired: reads again behind this scrape
        c.wait()
        assert value(samples(scrape_text(c)), "gpuwaste_up") == 1
    assert [r.getMessage() for r in caplog.records] == [
        f"serving gpuwaste_up 0: the warehouse at {d} has no analysis results yet: run "
        "`gpuwaste analyze`.",
        f"reading the warehouse at {d} again: gpuwaste_up 1",
    ]


def test_an_unreadable_result_file_gives_up_0_not_an_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    d = tmp_path / "data"
    build(d)
    (d / "parquet" / "job_gpu_usage" / "cluster=c1" / "built.parquet").write_bytes(b"not parquet")
    with caplog.at_level(logging.WARNING, logger="gpuwaste.exporter"):
        got = samples(scrape_text(WasteCollector(d)))
    assert value(got, "gpuwaste_up") == 0
    (line,) = [r.getMessage() for r in caplog.records]
    # the damaged file named, and what to do with it (warehouse.damaged)
    bad = d / "parquet" / "job_gpu_usage" / "cluster=c1" / "built.parquet"
    assert line.startswith(f"serving gpuwaste_up 0: the warehouse file {bad} ")
    assert "damaged" in line
    assert "\n" not in line and "Traceback" not in line


# ------------------------------------------------------------------------------------ HTTP
def test_the_server_answers_on_loopback(planted: Path) -> None:
    with serving(WasteCollector(planted)) as url:
        r = requests.get(url, timeout=30)
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/plain")
    got = samples(r.text)
    assert value(got, "gpuwaste_up") == 1
    assert (
        value(got, "gpuwaste_gpu_seconds_total", cluster="c1", vc="nlp", kind="allocated")
        == 2 * 3600
    )


def test_the_server_over_no_warehouse_answers_200_with_up_0(tmp_path: Path) -> None:
    with serving(WasteCollector(tmp_path / "none")) as url:
        r = requests.get(url, timeout=30)
    assert r.status_code == 200
    assert value(samples(r.text), "gpuwaste_up") == 0


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpuwaste", "exporter", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_command_refuses_a_port_in_use_in_one_sentence(planted: Path) -> None:
    with serving(WasteCollector(planted)) as url:
        port = url.split(":")[2].split("/")[0]
        done = _cli("--data-dir", str(planted), "--port", port)
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1].startswith(f"gpuwaste: cannot listen on 127.0.0.1:{port}: ")
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("after_s", [0.0, 0.1, 0.3])
def test_the_command_stops_cleanly_on_sigterm_while_reading(planted: Path, after_s: float) -> None:
    """SIGTERM at, or just after, the announcement, while the first read of the figures runs:
    the process once aborted (SIGABRT) when it exited with that read still in DuckDB, or died
    of the signal when it came before the handler."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuwaste", "exporter", "--data-dir", str(planted),
         "--port", str(free_port())],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stderr is not None
    try:
        banner = proc.stderr.readline()
        assert banner.startswith("gpuwaste exporter on http://127.0.0.1:"), banner
        time.sleep(after_s)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert (proc.returncode, err) == (0, "")


def test_the_exporter_section_of_the_configuration() -> None:
    s = parse_settings({"exporter": {"port": 9999, "top_jobs": 5, "cache_seconds": 30}})
    assert (s.exporter.port, s.exporter.top_jobs, s.exporter.cache_seconds) == (9999, 5, 30)
    assert parse_settings({}).exporter.port == 9815
    with pytest.raises(ConfigError, match=r"key 'exporter.top_jobs'"):
        parse_settings({"exporter": {"top_jobs": -1}}, "g.toml")
    with pytest.raises(ConfigError, match=r"unknown key 'exporter.topn'"):
        parse_settings({"exporter": {"topn": 3}}, "g.toml")
    assert math.isfinite(parse_settings({}).exporter.update_interval_s)


def test_ten_thousand_idle_jobs_give_top_n_plus_one_series_per_cluster(tmp_path: Path) -> None:
    n = 10_000
    ids = [f"j{i:05d}" for i in range(n)]
    start = [T - timedelta(minutes=1 + i % 600) for i in range(n)]  # idle 1 min .. 10 h
    jobs = pl.DataFrame({"job_id": ids, "user": "u", "vc": "nlp", "name": "x", "gpus": 1,
                         "running": True, "state": "running", "is_debug": False,
                         "size_class": "1", "start_ts": start, "end_ts": None},
                        schema_overrides={"end_ts": pl.Datetime("us", "UTC")})  # fmt: skip
    gpus = pl.DataFrame({"job_id": ids, "attempt": 0, "host": "h", "gpu": list(range(n)),
                         "start_ts": start, "end_ts": T, "never_used": True})  # fmt: skip
    gpus = gpus.with_columns(
        alloc_s=(pl.col("end_ts") - pl.col("start_ts")).dt.total_seconds().cast(pl.Float64),
        missing_s=pl.lit(0.0),
        idle_slot_s=pl.lit(0.0),
    ).with_columns(never_used_s=pl.col("alloc_s"))
    d = tmp_path / "data"
    wh = Warehouse(d)
    wh.replace_file("job_usage", "big", "built", jobs)
    wh.replace_file("job_gpu_usage", "big", "built", gpus)
    refresh_catalog(d, force=True)
    got = samples(scrape_text(WasteCollector(d, top_jobs=50)))
    idle = got["gpuwaste_idle_job_idle_seconds"]
    assert len(idle) == 51 and len(got["gpuwaste_idle_job_gpus"]) == 51
    other = (("cluster", "big"), ("job_id", OTHER_JOBS), ("user", ""), ("vc", ""))
    assert value(got, "gpuwaste_idle_job_gpus", **dict(other)) == n - 50
    minutes = sorted((1 + i % 600 for i in range(n)), reverse=True)  # idle, most first
    assert idle[other] == minutes[50] * 60  # the longest idle of the jobs beyond the top 50
    assert value(got, "gpuwaste_idle_jobs", cluster="big") == n
    top = sorted((v for k, v in idle.items() if k != other), reverse=True)
    assert top == [m * 60 for m in minutes[:50]]
