"""A Prometheus ingest SIGKILLed at 20+ exact points, then re-run: the warehouse equals the one
of an uninterrupted run, row for row.

The ingest runs as a real `gpuwaste ingest prometheus` process (through tests/reliability/
kill_driver.py, which counts every parquet write, rename and watermark update and kills the
process with SIGKILL at the chosen one) against a real Prometheus backfilled with a synthetic
cluster; 5 windows of 99 points each. Kill points cover every kind of event in every window:
mid parquet write (a torn temporary file), just before and just after a rename, before the
watermark update and during it.
"""

from __future__ import annotations

import json
import signal
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import polars as pl
import pytest
from harness.prometheus import PrometheusServer

from gpuwaste.warehouse.bookkeeping import get_watermark
from gpuwaste.warehouse.reading import read_rows
from gpuwaste.warehouse.readonly import read_only_connection
from gpuwaste.warehouse.store import Warehouse
from tests.reliability.faults import (
    SPEC,
    assert_same,
    ingest_args,
    leftover_temp_files,
    run_driver,
    snapshot,
    write_config,
)

pytestmark = [pytest.mark.slow, pytest.mark.prometheus]

MIN_KILL_POINTS = 20


@pytest.fixture(scope="module")
def reference(
    served: PrometheusServer, tmp_path_factory: pytest.TempPathFactory
) -> tuple[dict[str, pl.DataFrame], list[str]]:
    """An uninterrupted run: its warehouse and its sequence of events."""
    tmp = tmp_path_factory.mktemp("reference")
    cfg = write_config(tmp / "gpuwaste.toml", tmp / "wh", served.url)
    res = run_driver(ingest_args(cfg), {"GPUWASTE_TEST_TRACE": str(tmp / "trace.json")})
    assert res.returncode == 0, res.stderr
    events = json.loads((tmp / "trace.json").read_text())
    snap = snapshot(tmp / "wh")
    assert snap["gpu_samples"].height == SPEC.planted_gpu_rows
    assert events.count("watermark") == 5  # five windows
    return snap, events


def kill_points(events: list[str]) -> list[str]:
    """Every watermark event (before and during the update) and, between them, writes and
    renames (before and after), so that every window is cut at several places."""
    points: list[str] = []
    for i, e in enumerate(events):
        if e in ("watermark", "rename-watermark"):
            points.append(str(i))
    others = [i for i, e in enumerate(events) if e in ("write", "rename")]
    step = max(1, len(others) // 12)
    for k, i in enumerate(others[::step]):
        after = events[i] == "rename" and k % 2 == 1
        points.append(f"{i}+" if after else str(i))
    return sorted(set(points), key=lambda p: int(p.rstrip("+")))


def test_killed_ingest_resumes_to_the_same_warehouse(
    served: PrometheusServer,
    reference: tuple[dict[str, pl.DataFrame], list[str]],
    tmp_path: Path,
) -> None:
    want, events = reference
    points = kill_points(events)
    assert len(points) >= MIN_KILL_POINTS, points
    gpu_want = want["gpu_samples"]

    def kill_and_resume(point: str) -> str:
        d = tmp_path / f"kill-{point}"
        cfg = write_config(d.with_suffix(".toml"), d, served.url)
        res = run_driver(ingest_args(cfg), {"GPUWASTE_TEST_KILL_AT": point})
        assert res.returncode == -signal.SIGKILL, (point, res.returncode, res.stderr)
        # What a killed run leaves: every window before the watermark complete, none doubled.
        wm = get_watermark(Warehouse(d), "c1", "prometheus") if (d / "parquet").exists() else None
        if wm is not None:
            got = snapshot(d)["gpu_samples"]
            assert got.filter(pl.col("ts") < wm).equals(gpu_want.filter(pl.col("ts") < wm)), point
        # Re-run to completion.
        again = run_driver(ingest_args(cfg))
        assert again.returncode == 0, (point, again.stderr)
        assert_same(snapshot(d), want, f"kill point {point} ({events[int(point.rstrip('+'))]})")
        # The next run under the lock swept the torn temporary files the kill left.
        assert not leftover_temp_files(d), point
        # (read as the report commands read, without `gpuwaste sql`'s process-wide memory bound,
        # which the ingests started meanwhile by the other threads would inherit)
        con = read_only_connection(d)
        try:
            assert read_rows(con, "select count(*) from gpu_samples") == [(gpu_want.height,)]
        finally:
            con.close()
        return point

    with ThreadPoolExecutor(max_workers=3) as pool:  # each point is two real processes
        killed = len(list(pool.map(kill_and_resume, points)))
    assert killed >= MIN_KILL_POINTS
    print(f"\n{killed} kill points over {len(events)} events: {', '.join(points)}")
