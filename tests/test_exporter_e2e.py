"""End to end with real components: `gpuwaste generate` -> ingest -> analyze -> `gpuwaste
exporter` (the command, a separate process) -> Debian's Prometheus on loopback scraping it every
second and evaluating deploy/prometheus/gpuwaste-rules.yml every second.

The generated cluster's planted truth (`truth.json`) holds running jobs idle on all their GPUs up
to the window's end. Its longest idle one has been idle for less than the rule's 2 h, so the test
runs the rule file with only the idle threshold changed, to halfway between the longest and the
second longest planted idle time: the alert must then be pending or firing for exactly the
longest one, and the exporter's series must name every planted idle job.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl
import pytest
import requests
from harness.components import free_port
from harness.prometheus import PrometheusServer

from gpuwaste.analyses.run import analyze
from gpuwaste.config import CostSettings
from gpuwaste.demo import demo_settings
from gpuwaste.exporter.figures import read_figures
from gpuwaste.exporter.metrics import SERIES_NAMES
from gpuwaste.generate.cli import generate_command
from gpuwaste.ingest.run import run_configured
from gpuwaste.ingest.sources import SOURCES
from gpuwaste.warehouse.readonly import read_only_connection

pytestmark = [pytest.mark.slow, pytest.mark.prometheus]

RULES = Path(__file__).resolve().parent.parent / "deploy" / "prometheus" / "gpuwaste-rules.yml"
IDLE_RULE = 'gpuwaste_idle_job_idle_seconds{job_id!="(other)"} >= 2 * 3600'
SEED, GPUS = 3, 16
DEADLINE_S = 120.0
PRICE = 3.0


def _ts(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def planted_idle_running_jobs(truth: dict[str, Any]) -> dict[str, float]:
    """job id -> seconds idle at the window's end, for the running jobs whose every GPU is never
    used or in an idle slot reaching the window's end (the planted truth, not the analyses)."""
    end = truth["window"]["end"]
    never = {(n["job_id"], n["host"], n["gpu"]) for n in truth["never_used"]}
    slots = {
        (s["job_id"], s["host"], s["gpu"]): s["start"]
        for s in truth["idle_slots"]
        if s["end"] == end
    }
    out: dict[str, float] = {}
    for job in truth["jobs"]:
        if job["end"] is not None or not job["alloc"]:
            continue
        since: list[str] = []
        for a in job["alloc"]:
            key = (job["job_id"], a["host"], a["gpu"])
            if key in never:
                since.append(job["start"])
            elif key in slots:
                since.append(slots[key])
            else:
                break
        else:
            out[job["job_id"]] = (_ts(end) - max(map(_ts, since))).total_seconds()
    return out


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, float]]:
    base = tmp_path_factory.mktemp("e2e")
    out = base / "cluster"
    generate_command(out, SEED, GPUS, 1.0, 15, None, "demo", False)
    idle = planted_idle_running_jobs(json.loads((out / "truth.json").read_text()))
    data_dir = base / "data"
    # priced, so that the money metric is served too (every GPU model at PRICE per GPU hour)
    settings = demo_settings(data_dir, out).model_copy(
        update={"cost": CostSettings(gpu_hour={"*": PRICE})}
    )
    run_configured(settings, SOURCES)
    analyze(settings)
    return data_dir, idle


def wait_for(what: str, check: Any) -> Any:
    deadline = time.monotonic() + DEADLINE_S
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except requests.RequestException:
            last = None
        if last:
            return last
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {DEADLINE_S} s (last: {last!r})")


@pytest.fixture(scope="module")
def exporter_url(generated: tuple[Path, dict[str, float]]) -> Iterator[str]:
    data_dir, _ = generated
    port = free_port()
    cmd = [sys.executable, "-m", "gpuwaste", "exporter", "--data-dir", str(data_dir),
           "--port", str(port), "--cache-seconds", "1"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for("the exporter answers", lambda: requests.get(f"{url}/metrics", timeout=5).ok)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert "Traceback" not in err


@pytest.fixture(scope="module")
def prometheus(
    generated: tuple[Path, dict[str, float]],
    exporter_url: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[str, str]]:
    """Prometheus scraping the exporter, with the rules; yields (its URL, the idle-job id the
    alert must name)."""
    _, idle = generated
    longest, second = sorted(idle.values(), reverse=True)[:2]
    assert longest - second >= 120, "the planted idle times are too close to tell apart"
    threshold = (longest + second) / 2
    work = tmp_path_factory.mktemp("prometheus")
    rules_text = RULES.read_text()
    assert IDLE_RULE in rules_text
    rules = work / "rules.yml"
    rules.write_text(rules_text.replace(IDLE_RULE, IDLE_RULE.replace("2 * 3600", f"{threshold}")))
    server = PrometheusServer(work / "unused.om", work)
    server.data_dir.mkdir(parents=True)  # an empty TSDB: nothing to backfill
    server.start()
    try:
        # the helper starts Prometheus without targets; give it ours and reload (SIGHUP)
        target = exporter_url.removeprefix("http://")
        server.config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            f"rule_files:\n  - {rules}\n"
            "scrape_configs:\n  - job_name: gpuwaste\n"
            f"    static_configs:\n      - targets: ['{target}']\n"
        )
        assert server.proc is not None
        server.proc.send_signal(signal.SIGHUP)
        (job,) = [j for j, s in idle.items() if s == longest]
        yield server.url, job
    finally:
        server.stop()


def query(url: str, promql: str) -> list[dict[str, Any]]:
    body = requests.get(f"{url}/api/v1/query", params={"query": promql}, timeout=10).json()
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def test_prometheus_holds_the_exporters_series(
    prometheus: tuple[str, str], generated: tuple[Path, dict[str, float]]
) -> None:
    url, _ = prometheus
    _, idle = generated
    up = wait_for("gpuwaste_up scraped", lambda: query(url, 'gpuwaste_up{job="gpuwaste"}'))
    assert up[0]["value"][1] == "1"
    names = wait_for(
        "every metric scraped",
        lambda: (
            set(requests.get(f"{url}/api/v1/label/__name__/values", timeout=10).json()["data"])
            >= SERIES_NAMES
        ),
    )
    assert names
    jobs = query(url, 'gpuwaste_idle_job_idle_seconds{cluster="demo"}')
    served = {r["metric"]["job_id"]: float(r["value"][1]) for r in jobs}
    assert set(served) == set(idle), "one series per planted idle running job"
    for job, seconds in idle.items():
        # the analyses' idle slot starts where its first idle sample's time begins and ends at
        # the newest data: within a sampling interval (15 s) of the truth at either end
        assert abs(served[job] - seconds) <= 30, job
    seconds = query(url, 'gpuwaste_gpu_seconds_total{cluster="demo",kind="allocated"}')
    assert seconds and all(float(r["value"][1]) > 0 for r in seconds)


def test_the_idle_job_alert_is_pending_or_firing_for_exactly_the_planted_job(
    prometheus: tuple[str, str],
) -> None:
    url, job = prometheus

    def alerting() -> list[dict[str, Any]]:
        alerts = requests.get(f"{url}/api/v1/alerts", timeout=10).json()["data"]["alerts"]
        return [a for a in alerts if a["labels"]["alertname"] == "GpuwasteJobIdleOnAllGpus"]

    alerts = wait_for("the idle-job alert", alerting)
    time.sleep(3)  # a few more evaluations: no other job joins it
    alerts = alerting()
    assert [a["labels"]["job_id"] for a in alerts] == [job]
    assert alerts[0]["state"] in ("pending", "firing")
    assert alerts[0]["labels"]["cluster"] == "demo"


def test_the_7d_window_of_a_one_day_cluster_is_the_analyses_whole_total(
    generated: tuple[Path, dict[str, float]],
) -> None:
    """The generated cluster spans one day, inside the 7 d window: per VC, the exporter's GPU
    hours (window_hours.sql) equal waste_daily's (the analyses' own per-day split) summed, and
    its money wasted equals the jobs' stored lost_cost summed."""
    data_dir, _ = generated
    figs = read_figures(data_dir, 50, datetime.now(UTC))
    con = read_only_connection(data_dir)
    try:
        daily = con.sql(
            "SELECT cluster, vc, sum(alloc_gpu_h) AS allocated_gpu_h, sum(busy_gpu_h) AS busy_gpu_h,"
            " sum(idle_slot_gpu_h) AS idle_slot_gpu_h, sum(never_used_gpu_h) AS never_used_gpu_h,"
            " sum(missing_gpu_h) AS missing_gpu_h, sum(debug_gpu_h) AS debug_gpu_h "
            "FROM waste_daily WHERE vc <> '(all)' AND gpu_model = '(all)' "
            "GROUP BY ALL ORDER BY cluster, vc"
        ).pl()
        lost = con.sql(
            "SELECT cluster, coalesce(vc, '(none)') AS vc, sum(lost_cost) AS lost_cost "
            "FROM job_usage GROUP BY ALL"
        ).pl()
    finally:
        con.close()
    week = figs.windows.filter(pl.col("window") == "7d").drop("window").sort("cluster", "vc")
    assert week.height == daily.height > 4
    assert week.select("cluster", "vc").equals(daily.select("cluster", "vc"))
    money = week.join(lost, on=["cluster", "vc"], how="left")
    assert money["wasted_money"].to_list() == pytest.approx(money["lost_cost"].to_list(), rel=1e-6)
    assert money["wasted_money"].sum() > PRICE  # more than one GPU hour wasted
    week = week.drop("wasted_money")
    for column in week.columns[2:]:
        assert week[column].to_list() == pytest.approx(
            daily[column].to_list(), rel=1e-6, abs=1e-5
        ), column
    assert week["idle_slot_gpu_h"].sum() > 1 and week["never_used_gpu_h"].sum() > 1
