"""Prometheus misbehaving mid-run: each fault ends in a successful retry or one clear error,
never a wrong or partial window, and the watermark never passes what was written.

A faulty proxy (fault_proxy.py) stands between the ingest and a real Prometheus; the fault hits
request 15 of 35 (the third of five windows), once (the retry should succeed) or for good (the
run must stop with one sentence naming the server). After a failure the warehouse holds exactly
the windows before the watermark, and a re-run completes it to the uninterrupted result.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest
from harness.prometheus import PrometheusServer

from gpuwaste.config import ClusterConfig, PrometheusSource, Settings
from gpuwaste.errors import GpuwasteError
from gpuwaste.ingest.prometheus.source import ingest_prometheus
from gpuwaste.warehouse.bookkeeping import get_watermark
from gpuwaste.warehouse.store import Warehouse
from tests.reliability.fault_proxy import FaultProxy, Plan, at, fault_proxy
from tests.reliability.faults import MAX_POINTS, assert_same, bounds, leftover_temp_files, snapshot

pytestmark = [pytest.mark.prometheus]

FAULT_AT = 15  # of 35 requests: inside the third window


def ingest(data_dir: Path, url: str, *, retries: int = 1, timeout_s: float = 5.0) -> None:
    src = PrometheusSource(
        url=url, retries=retries, timeout_s=timeout_s, max_points_per_query=MAX_POINTS
    )
    start, end = bounds()
    ingest_prometheus(
        Settings(data_dir=data_dir),
        ClusterConfig(name="c1", prometheus=src),
        since=start,
        until=end,
        quiet=True,
    )


@pytest.fixture(scope="module")
def proxy(served: PrometheusServer) -> Iterator[FaultProxy]:
    with fault_proxy(served.url) as p:
        yield p


@pytest.fixture(scope="module")
def reference(
    proxy: FaultProxy, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, pl.DataFrame]:
    d = tmp_path_factory.mktemp("ref") / "wh"
    proxy.plan, proxy.actions = (lambda n: "pass"), []
    ingest(d, proxy.url)
    assert len(proxy.actions) == 36  # with the metric names asked once to recognise the dialect
    return snapshot(d)


def check_partial(d: Path, want: dict[str, pl.DataFrame]) -> None:
    """After a failed run: the windows before the watermark, exactly, and nothing after it."""
    wm = get_watermark(Warehouse(d), "c1", "prometheus")
    assert wm is not None, "the first windows were finished: the watermark must be set"
    got = snapshot(d)
    for table in ("gpu_samples", "host_samples"):
        assert got[table].filter(pl.col("ts") >= wm).height == 0, table
        assert got[table].equals(want[table].filter(pl.col("ts") < wm)), table
    assert not leftover_temp_files(d)


CASES: dict[str, tuple[Plan, dict[str, float], str | None]] = {
    # name: (plan, ingest options, None = must succeed | text the error must contain)
    "503 once, retried": (at(FAULT_AT, "503"), {}, None),
    "503 for good": (lambda n: "503" if n >= FAULT_AT else "pass", {}, "HTTP 503"),
    "slow once, retried": (at(FAULT_AT, "slow"), {"timeout_s": 1.0}, None),
    "slow for good": (
        lambda n: "slow" if n >= FAULT_AT else "pass",
        {"timeout_s": 1.0},
        "no answer within 1 s",
    ),
    "connection closed mid-response": (at(FAULT_AT, "cut"), {}, None),
    "connection closed for good": (
        lambda n: "cut" if n >= FAULT_AT else "pass",
        {},
        "closed mid-answer",
    ),
    "truncated JSON": (at(FAULT_AT, "truncated"), {}, ""),
    "error answer": (at(FAULT_AT, "error-json"), {}, "query failed"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_server_fault(
    case: str, proxy: FaultProxy, reference: dict[str, pl.DataFrame], tmp_path: Path
) -> None:
    plan, opts, expect = CASES[case]
    proxy.plan, proxy.actions, proxy.delay_s = plan, [], 2.5
    d = tmp_path / "wh"
    try:
        ingest(d, proxy.url, **opts)  # type: ignore[arg-type]
        failed: GpuwasteError | None = None
    except GpuwasteError as exc:
        failed = exc
    assert len(proxy.actions) > FAULT_AT and proxy.actions[FAULT_AT] != "pass"
    print(
        f"\n{case}: {proxy.actions.count('pass')} passed, faults {proxy.actions[FAULT_AT : FAULT_AT + 3]}"
        f" -> {'completed' if failed is None else failed}"
    )
    if failed is None:
        assert expect in (None, ""), f"{case}: expected an error"
        assert_same(snapshot(d), reference, case)
        return
    assert expect is not None, f"{case}: should have been retried: {failed}"
    message = str(failed)
    assert proxy.url in message and "\n" not in message, message
    assert expect in message, message
    check_partial(d, reference)
    proxy.plan = lambda n: "pass"
    ingest(d, proxy.url)
    assert_same(snapshot(d), reference, f"{case}, re-run")


def test_prometheus_stopped_then_restarted(
    served: PrometheusServer, proxy: FaultProxy, reference: dict[str, pl.DataFrame], tmp_path: Path
) -> None:
    """Prometheus restarts mid-run (a real stop and start of the process): the retries either
    outlast the restart or the run stops with the clear error; a re-run completes it."""
    restarted = threading.Event()

    def plan(n: int) -> str:
        if n == FAULT_AT and not restarted.is_set():
            restarted.set()
            served.restart()  # a real stop and start; this request then fails
            return "503"
        return "pass"

    proxy.plan, proxy.actions = plan, []
    d = tmp_path / "wh"
    try:
        ingest(d, proxy.url, retries=4, timeout_s=60)
        assert restarted.is_set()
        assert_same(snapshot(d), reference, "restart outlasted")
        print(f"\nrestart: retried through it ({len(proxy.actions)} requests)")
    except GpuwasteError as exc:
        print(f"\nrestart: {exc}")
        assert proxy.url in str(exc) and "\n" not in str(exc)
        check_partial(d, reference)
    assert served.running
    proxy.plan = lambda n: "pass"
    ingest(d, proxy.url)
    assert_same(snapshot(d), reference, "after the restart")


def test_prometheus_stopped_before_the_run(
    served: PrometheusServer, proxy: FaultProxy, tmp_path: Path
) -> None:
    served.stop()
    try:
        d = tmp_path / "wh"
        with pytest.raises(GpuwasteError) as err:
            ingest(d, served.url, retries=1)
    finally:
        served.start()
    message = str(err.value)
    assert "unreachable" in message and served.url in message and "\n" not in message
    assert not (d / "parquet").exists() or get_watermark(Warehouse(d), "c1", "prometheus") is None
