"""Ingest and analyze running while readers query; two ingests at once.

Readers are the two read paths of the product: `gpuwaste sql` (reading.read_query) and the dashboard's
connection (read_only_connection, the same views the dashboard's pages select from). While a real
`gpuwaste ingest prometheus` process writes window after window (and `gpuwaste analyze` rewrites
the result tables), readers query in a loop: no query may fail, and every count of gpu_samples
must be a whole number of windows (a torn partition would give any other number).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest
from harness.prometheus import PrometheusServer

from gpuwaste.config import ClusterConfig, PrometheusSource, Settings
from gpuwaste.dashboard import queries
from gpuwaste.ingest.prometheus.source import ingest_prometheus, window_length
from gpuwaste.warehouse.catalog import refresh_catalog
from gpuwaste.warehouse.reading import read_query
from gpuwaste.warehouse.readonly import check_read_only, read_only_connection
from gpuwaste.warehouse.store import Warehouse
from tests.reliability.fault_proxy import FaultProxy, fault_proxy
from tests.reliability.faults import MAX_POINTS, bounds, ingest_args, write_config

pytestmark = [pytest.mark.slow, pytest.mark.prometheus]

WINDOW = window_length(PrometheusSource(url="http://x", max_points_per_query=MAX_POINTS))


def gpuwaste(*args: str) -> subprocess.Popen[str]:
    exe = Path(sys.executable).parent / "gpuwaste"
    return subprocess.Popen(
        [str(exe), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def first_window(d: Path, url: str) -> None:
    start, _ = bounds()
    src = PrometheusSource(url=url, retries=1, max_points_per_query=MAX_POINTS)
    ingest_prometheus(
        Settings(data_dir=d),
        ClusterConfig(name="c1", prometheus=src),
        since=start,
        until=start + WINDOW,
        quiet=True,
    )
    refresh_catalog(d)


class Readers:
    """Threads querying the warehouse in a loop until stopped; they record counts and errors."""

    def __init__(self, d: Path) -> None:
        self.d = d
        self.counts: set[int] = set()
        self.errors: list[str] = []
        self.queries = 0
        self.stop = threading.Event()
        self.threads = [
            threading.Thread(target=self._sql, daemon=True),
            threading.Thread(target=self._dashboard, daemon=True),
        ]

    def _record(self, fn: object) -> None:
        while not self.stop.is_set():
            try:
                n = fn()  # type: ignore[operator]
                self.counts.add(int(n))
                self.queries += 1
            except Exception as exc:  # any error is a failure of the test
                self.errors.append(f"{type(exc).__name__}: {exc}")

    def _sql(self) -> None:
        def q() -> int:  # what `gpuwaste sql` does (gpuwaste/cli.py)
            sql = check_read_only("select count(*) as n from gpu_samples")
            df = read_query(read_only_connection(self.d), sql)
            assert df is not None
            return int(df["n"][0])

        self._record(q)

    def _dashboard(self) -> None:
        con = read_only_connection(self.d)  # kept open, as the dashboard caches it

        def q() -> int:  # as dashboard/data.py: a cursor on the cached connection
            cur = con.cursor()
            try:
                counts = queries.table_counts(cur, ("gpu_samples", "job_usage", "jobs"))
            finally:
                cur.close()
            return counts["gpu_samples"]

        self._record(q)

    def __enter__(self) -> Readers:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=30)


def test_readers_never_see_a_torn_partition_and_a_second_ingest_refuses(
    served: PrometheusServer, tmp_path: Path
) -> None:
    with fault_proxy(served.url, lambda n: "slow") as proxy:  # every answer 0.1 s late
        proxy.delay_s = 0.1
        _run(proxy, tmp_path)


def _run(proxy: FaultProxy, tmp_path: Path) -> None:
    d = tmp_path / "wh"
    cfg = write_config(tmp_path / "gpuwaste.toml", d, proxy.url)
    first_window(d, proxy.url)
    pre = gpuwaste("analyze", "--config", str(cfg), "--quiet")
    assert pre.wait(timeout=300) == 0, pre.stderr.read() if pre.stderr else ""
    allowed = whole_window_counts_from_reference(proxy, tmp_path)
    with Readers(d) as readers:
        ingest = gpuwaste(*ingest_args(cfg))
        while not (d / ".ingest.lock").exists() or len(proxy.actions) < 2:
            time.sleep(0.05)
        second = gpuwaste(*ingest_args(cfg))
        out2, err2 = second.communicate(timeout=120)
        cli = [
            gpuwaste("sql", "--data-dir", str(d), "select count(*) from gpu_samples")
            for _ in range(3)
        ]  # the real CLI, too
        analyze = gpuwaste("analyze", "--config", str(cfg), "--quiet")
        _out, err = ingest.communicate(timeout=300)
        _a_out, a_err = analyze.communicate(timeout=300)
        cli_out = [(*p.communicate(timeout=120), p.returncode) for p in cli]
        time.sleep(0.5)  # readers see the final state too
    assert ingest.returncode == 0, err
    assert second.returncode == 1, (out2, err2)
    assert "another gpuwaste ingest is already running" in err2 and "Traceback" not in err2
    assert analyze.returncode == 0, a_err
    assert all(rc == 0 for _, _, rc in cli_out), cli_out
    assert not readers.errors, readers.errors[:5]
    assert readers.queries > 20, readers.queries
    assert readers.counts <= allowed, (sorted(readers.counts), sorted(allowed))
    assert max(readers.counts) == max(allowed)
    print(f"\n{readers.queries} reader queries saw counts {sorted(readers.counts)}")


def whole_window_counts_from_reference(proxy: FaultProxy, tmp_path: Path) -> set[int]:
    """gpu_samples counts after each window of the same run, uninterrupted."""
    ref = tmp_path / "ref"
    first_window(ref, proxy.url)
    counts = {Warehouse(ref).read("gpu_samples", "c1").height}
    start, end = bounds()
    src = PrometheusSource(url=proxy.url, retries=1, max_points_per_query=MAX_POINTS)

    def record(_i: int, _end: datetime) -> None:
        counts.add(Warehouse(ref).read("gpu_samples", "c1").height)

    ingest_prometheus(
        Settings(data_dir=ref),
        ClusterConfig(name="c1", prometheus=src),
        since=start,
        until=end,
        quiet=True,
        after_window=record,
    )
    proxy.actions.clear()
    assert len(counts) >= 5, counts
    return counts
