"""Clock and data oddities: samples out of order, duplicated, from the future; DST in local
scheduler times; a host renamed; a GPU replaced (new UUID, same index).

Telemetry oddities go through the OpenMetrics file source (the same row builders as the
Prometheus source) into a real warehouse, twice: nothing may double on the re-run.
"""

from __future__ import annotations

import random
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl

from gpuwaste.config import ClusterConfig, Settings
from gpuwaste.ingest.prometheus.openmetrics_source import ingest_openmetrics
from gpuwaste.ingest.slurm.parse import SacctOptions, parse_sacct
from gpuwaste.warehouse.store import Warehouse

T0 = 1_790_000_000  # 2026-09-21T14:13:20Z
STEP = 15


def line(host: str, gpu: int, uuid: str, t: int, util: float, job: str = "j1") -> str:
    labels = f'gpu="{gpu}",UUID="{uuid}",Hostname="{host}",hpc_job="{job}"'
    return f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} {util} {t}\nDCGM_FI_DEV_FB_USED{{{labels}}} 100 {t}\n"


def ingest(tmp_path: Path, text: str) -> pl.DataFrame:
    f = tmp_path / "metrics.om"
    f.write_text(text + "# EOF\n")
    d = tmp_path / "wh"
    for _ in range(2):  # a re-run replaces, never adds
        ingest_openmetrics(Settings(data_dir=d), ClusterConfig(name="c1"), f)
    return Warehouse(d).read("gpu_samples", "c1")


def assert_unique(gpu: pl.DataFrame) -> None:
    key = ["host", "gpu", "ts", "job_id"]
    assert gpu.select(key).unique().height == gpu.height, "duplicate rows"


def test_out_of_order_and_duplicated_samples(tmp_path: Path) -> None:
    # OpenMetrics forbids both, but files get concatenated: they are sorted and deduplicated.
    ts = [T0 + k * STEP for k in range(40)]
    order = ts + ts[5:15]  # ten samples twice
    random.Random(7).shuffle(order)
    text = "".join(line("n1", 0, "GPU-a", t, (t // STEP) % 100) for t in order)
    gpu = ingest(tmp_path, text)
    assert gpu.height == 40
    assert_unique(gpu)
    got = gpu.sort("ts")
    assert got["ts"].is_sorted()
    assert got["util"].to_list() == [float((t // STEP) % 100) for t in ts]  # values kept by time


def test_samples_from_the_future_and_far_past(tmp_path: Path) -> None:
    # A node with a wrong clock: its samples are stored at the time they claim, in their own day
    # partitions, and do not disturb the others.
    now = int(datetime.now(UTC).timestamp())
    text = "".join(line("n1", 0, "GPU-a", T0 + k * STEP, 50) for k in range(10))
    text += line("n2", 0, "GPU-b", now + 86400 * 365, 50)  # a year ahead
    text += line("n3", 0, "GPU-c", 86400, 50)  # 1970-01-02
    t0 = time.perf_counter()
    gpu = ingest(tmp_path, text)
    # Found here: the 57-year window made replace_window visit 20,000 absent day files (two
    # minutes); now only days with rows or files are touched.
    assert time.perf_counter() - t0 < 30
    assert gpu.height == 12
    assert_unique(gpu)
    days = sorted(p.parent.name for p in (tmp_path / "wh").rglob("gpu_samples/**/data.parquet"))
    assert len(days) == 3 and days[0] == "date=1970-01-02"


def test_host_renamed_midway(tmp_path: Path) -> None:
    # The same GPUs (same UUIDs) under a new host name from sample 20 on: both names are kept
    # for their own times; no sample is lost or doubled.
    text = "".join(
        line("node07" if k < 20 else "node07.cluster.local", g, f"GPU-{g}", T0 + k * STEP, 10)
        for k in range(40)
        for g in range(2)
    )
    gpu = ingest(tmp_path, text)
    assert gpu.height == 80
    assert_unique(gpu)
    by_host = dict(gpu.group_by("host").len().iter_rows())
    assert by_host == {"node07": 40, "node07.cluster.local": 40}
    assert set(gpu["uuid"].unique().to_list()) == {"GPU-0", "GPU-1"}


def test_gpu_replaced_new_uuid_same_index(tmp_path: Path) -> None:
    # GPU 1 of node01 fails and is replaced: a new UUID at the same index from sample 20 on.
    text = "".join(
        line("node01", 1, "GPU-old" if k < 20 else "GPU-new", T0 + k * STEP, 30) for k in range(40)
    )
    gpu = ingest(tmp_path, text)
    assert gpu.height == 40
    assert_unique(gpu)
    uuids = gpu.sort("ts")["uuid"].to_list()
    assert uuids == ["GPU-old"] * 20 + ["GPU-new"] * 20


def test_gpu_replaced_with_overlapping_samples_is_not_doubled(tmp_path: Path) -> None:
    # Both UUIDs report at the same instant (the exporter restarted around the swap): one row
    # per (host, gpu, ts, job) is kept, never two.
    t = T0 + 20 * STEP
    text = line("node01", 1, "GPU-old", t, 30) + line("node01", 1, "GPU-new", t, 40)
    gpu = ingest(tmp_path, text)
    assert gpu.height == 1


HEADER = "JobID|JobIDRaw|User|Account|Partition|State|Submit|Start|End|Elapsed|AllocTRES|NodeList"


def sacct_line(job: int, submit: str, start: str, end: str, elapsed: str) -> str:
    return f"{job}|{job}|u|a|gpu|COMPLETED|{submit}|{start}|{end}|{elapsed}|gres/gpu=1|n1"


def test_dst_fall_back_hour_read_by_elapsed() -> None:
    # Europe/Berlin, 2026-10-25: 02:00-03:00 happens twice. Elapsed decides which reading.
    text = "\n".join(
        [
            HEADER,
            # 02:30 CEST (00:30 UTC) to 02:10 CET (01:10 UTC): 40 min, end "before" start locally
            sacct_line(1, "2026-10-25T02:20:00", "2026-10-25T02:30:00", "2026-10-25T02:10:00", "00:40:00"),
            # 02:30 CET (01:30 UTC) to 02:50 CET (01:50 UTC): 20 min in the second pass
            sacct_line(2, "2026-10-25T02:25:00", "2026-10-25T02:30:00", "2026-10-25T02:50:00", "00:20:00"),
            # across the whole night: 01:00 CEST (23:00 UTC) to 04:00 CET (03:00 UTC): 4 h
            sacct_line(3, "2026-10-25T00:55:00", "2026-10-25T01:00:00", "2026-10-25T04:00:00", "04:00:00"),
        ]
    )  # fmt: skip
    res = parse_sacct(text, SacctOptions(timezone="Europe/Berlin"))
    assert not res.refused, res.refused
    got = {r["job_id"]: (r["start_ts"], r["end_ts"]) for r in res.jobs.iter_rows(named=True)}
    utc = lambda h, m: datetime(2026, 10, 25, h, m, tzinfo=UTC) if h >= 0 else None  # noqa: E731
    assert got["1"] == (utc(0, 30), utc(1, 10))
    assert got["2"][1] - got["2"][0] == timedelta(minutes=20)
    assert got["3"] == (datetime(2026, 10, 24, 23, 0, tzinfo=UTC), utc(3, 0))


def test_dst_spring_forward_gap_never_gives_a_negative_duration() -> None:
    # Europe/Berlin, 2026-03-29: 02:00-03:00 does not exist. A time written in the gap (a clock
    # set by hand) is accepted or refused, never stored with the end before the start.
    text = "\n".join(
        [
            HEADER,
            sacct_line(4, "2026-03-29T01:50:00", "2026-03-29T01:55:00", "2026-03-29T03:05:00", "00:10:00"),
            sacct_line(5, "2026-03-29T02:10:00", "2026-03-29T02:15:00", "2026-03-29T02:45:00", "00:30:00"),
        ]
    )  # fmt: skip
    res = parse_sacct(text, SacctOptions(timezone="Europe/Berlin"))
    assert res.accepted + len(res.refused) == 2
    for r in res.jobs.iter_rows(named=True):
        assert r["end_ts"] >= r["start_ts"], r
    four = res.jobs.filter(pl.col("job_id") == "4").row(0, named=True)
    assert four["end_ts"] - four["start_ts"] == timedelta(minutes=10)  # 00:55 -> 01:05 UTC
