"""Clock and data oddities: samples out of order, duplicated, from the future (and what one such
sample does to the analyses and the exporter); DST in local scheduler times; a host renamed; a
GPU replaced (new UUID, same index).

Telemetry oddities go through the OpenMetrics file source (the same row builders as the
Prometheus source) into a real warehouse, twice: nothing may double on the re-run.
"""

from __future__ import annotations

import random
import shutil
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from gpuwaste.analyses.run import analyze
from gpuwaste.config import ClusterConfig, CsvSource, IngestSettings, Settings, SlurmSource
from gpuwaste.exporter.figures import read_figures
from gpuwaste.generate.cli import generate_command
from gpuwaste.ingest.prometheus.openmetrics_source import ingest_openmetrics
from gpuwaste.ingest.slurm.parse import SacctOptions, parse_sacct
from gpuwaste.ingest.slurm.source import ingest_slurm
from gpuwaste.ingest.tabular.source import ingest_tabular
from gpuwaste.warehouse.bookkeeping import set_watermark
from gpuwaste.warehouse.readonly import read_only_connection
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


def test_duplicate_samples_with_other_values_are_quarantined(tmp_path: Path) -> None:
    # Issue #47: two readings of one GPU at one instant with different values kept the first and
    # dropped the others without a word. Each dropped reading is now quarantined (the first is
    # still kept); exact repeats lose nothing and are dropped silently, as before.
    ts = [T0 + k * STEP for k in range(10)]
    text = "".join(line("n1", 0, "GPU-a", t, 10) for t in ts)
    text += "".join(line("n1", 0, "GPU-a", t, 10) for t in ts[:3])  # exact repeats
    text += line("n1", 0, "GPU-a", ts[5], 99) + line("n1", 0, "GPU-a", ts[6], 98)  # other values
    gpu = ingest(tmp_path, text)
    assert gpu.height == 10 and set(gpu["util"]) == {10.0}
    q = Warehouse(tmp_path / "wh").read("quarantine", "c1").sort("location")
    assert q["reason"].str.starts_with("conflicting duplicate").to_list() == [True, True]
    assert q["raw"].to_list() == ["99", "98"]
    at = [datetime.fromtimestamp(t, UTC).isoformat() for t in ts[5:7]]
    assert [loc.endswith(f"at {a}") for loc, a in zip(q["location"], at, strict=True)] == [True] * 2


def test_csv_samples_repeated_with_other_values_and_from_the_future(tmp_path: Path) -> None:
    # The CSV source keeps the last reading of a (host, GPU, job, time) (a later row corrects an
    # earlier one): the earlier one with another value is quarantined; a node a year ahead is
    # refused with its host named, by its line.
    future = (datetime.now(UTC) + timedelta(days=365)).strftime("%Y-%m-%dT%H:%M:%SZ")
    (tmp_path / "s.csv").write_text(
        "t,h,g,u\n"
        "2026-11-01T10:00:00Z,n1,0,10\n"
        "2026-11-01T10:00:00Z,n1,0,10\n"  # an exact repeat: nothing to say
        "2026-11-01T10:00:00Z,n1,0,30\n"  # another value: the last is kept
        f"{future},n2,0,50\n"
    )
    (tmp_path / "m.toml").write_text('[samples]\ntime = "t"\nhost = "h"\ngpu = "g"\nutil = "u"\n')
    src = CsvSource(samples=tmp_path / "s.csv", mapping=tmp_path / "m.toml")
    result = ingest_tabular(
        Settings(data_dir=tmp_path / "wh"), ClusterConfig(name="c1", csv=src), "csv"
    )
    gpu = Warehouse(tmp_path / "wh").read("gpu_samples", "c1")
    assert gpu.select("host", "util").rows() == [("n1", 30.0)]
    assert result.accepted == 2  # of 4 rows: the exact repeat is accepted, stored once
    reasons = sorted(r.reason for r in result.refused)
    assert reasons[0].startswith("conflicting duplicate") and "the last one read" in reasons[0]
    assert reasons[1].startswith("from the future: host n2, later than")
    assert any(r.location.endswith("s.csv:5") for r in result.refused)


def test_samples_from_the_future_and_far_past_are_quarantined_with_their_host(
    tmp_path: Path,
) -> None:
    # A node whose clock is a year ahead, one reset to 1970 (a dead RTC battery): refused, each
    # with its host named, and the others stored.
    now = int(datetime.now(UTC).timestamp())
    text = "".join(line("n1", 0, "GPU-a", T0 + k * STEP, 50) for k in range(10))
    text += line("n2", 0, "GPU-b", now + 86400 * 365, 50)  # a year ahead
    text += line("n3", 0, "GPU-c", 86400, 50)  # 1970-01-02
    gpu = ingest(tmp_path, text)
    assert gpu.height == 10 and set(gpu["host"]) == {"n1"}
    q = Warehouse(tmp_path / "wh").read("quarantine", "c1").sort("reason")
    reasons = q["reason"].to_list()
    assert len(reasons) == 4  # two metrics of each of the two hosts
    assert all(r.startswith("from the distant past: 1 sample(s) of host n3") for r in reasons[:2])
    assert all(r.startswith("from the future: 1 sample(s) of host n2") for r in reasons[2:])
    days = sorted(p.parent.name for p in (tmp_path / "wh").rglob("gpu_samples/**/data.parquet"))
    assert days == ["date=2026-09-21"]


def test_a_floor_set_back_stores_the_distant_past_quickly(tmp_path: Path) -> None:
    # With `[ingest] earliest_time` set to 1970, a 1970 sample is stored in its own day.
    text = "".join(line("n1", 0, "GPU-a", T0 + k * STEP, 50) for k in range(10))
    text += line("n3", 0, "GPU-c", 86400, 50)  # 1970-01-02
    f = tmp_path / "metrics.om"
    f.write_text(text + "# EOF\n")
    settings = Settings(
        data_dir=tmp_path / "wh", ingest=IngestSettings(earliest_time=datetime(1970, 1, 1))
    )
    t0 = time.perf_counter()
    ingest_openmetrics(settings, ClusterConfig(name="c1"), f)
    # Found here: the 57-year window made replace_window visit 20,000 absent day files (two
    # minutes); now only days with rows or files are touched.
    assert time.perf_counter() - t0 < 30
    assert Warehouse(tmp_path / "wh").read("gpu_samples", "c1").height == 11
    days = sorted(p.parent.name for p in (tmp_path / "wh").rglob("gpu_samples/**/data.parquet"))
    assert days == ["date=1970-01-02", "date=2026-09-21"]


# The line of issue #47: one DCGM sample of gpu-node-001 dated 2200-01-01.
FUTURE_LINE = (
    'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-x",modelName="NVIDIA A100-SXM4-80GB",'
    'Hostname="gpu-node-001"} 10 7258118400\n'
)


def _figures(data_dir: Path) -> dict[str, pl.DataFrame]:
    """What the analyses and the exporter say of the cluster (not when they ran)."""
    con = read_only_connection(data_dir)
    try:
        jobs = con.sql(
            "select job_id, running, gpu_s, idle_slot_gpu_s, never_used_gpu_s, duration_s "
            "from job_usage order by job_id"
        ).pl()
        totals = con.sql(
            "select count(*) as jobs, sum(gpu_s) as gpu_s, sum(idle_slot_gpu_s) as idle_s "
            "from job_usage"
        ).pl()
    finally:
        con.close()
    figs = read_figures(data_dir, 50, datetime.now(UTC))
    return {
        "jobs": jobs,
        "totals": totals,
        "windows": figs.windows,
        "idle_jobs": figs.idle_jobs,
        "idle_counts": figs.idle_counts,
        "data_until": figs.data_until,
    }


@pytest.fixture(scope="module")
def analyzed(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """Issue #47's cluster, smaller: 8 GPUs for 6 hours (seed 3), ingested and analyzed."""
    tmp = tmp_path_factory.mktemp("future")
    generate_command(tmp / "g", seed=3, gpus=8, days=0.25)
    settings = Settings(data_dir=tmp / "wh")
    ingest_openmetrics(settings, ClusterConfig(name="demo"), tmp / "g" / "metrics.om")
    slurm = ClusterConfig(name="demo", slurm=SlurmSource(file=tmp / "g" / "sacct.txt"))
    ingest_slurm(settings, slurm)
    analyze(settings, quiet=True)
    return settings


def test_one_sample_from_the_future_moves_no_figure(analyzed: Settings, tmp_path: Path) -> None:
    # Issue #47: a running job was counted up to the newest sample of its cluster, so this one
    # line took a 16-GPU cluster from 284.9 GPU hours to 15,179,685. Now the sample is refused
    # with its host, and no analysis or exporter figure moves.
    data = tmp_path / "wh"
    shutil.copytree(analyzed.data_dir, data)
    settings = analyzed.model_copy(update={"data_dir": data})
    before = _figures(data)
    running = before["jobs"].filter(pl.col("running"))
    assert running.height and running["gpu_s"].sum() > 0  # the case: a job running at the end
    bad = tmp_path / "bad.om"
    bad.write_text(FUTURE_LINE + "# EOF\n")
    result = ingest_openmetrics(settings, ClusterConfig(name="demo"), bad)
    analyze(settings, quiet=True)
    after = _figures(data)
    for name, frame in before.items():
        assert after[name].equals(frame), name
    assert result.accepted == 0 and len(result.refused) == 1
    q = Warehouse(data).read("quarantine", "demo")
    assert q.height == 1
    assert q["reason"][0].startswith("from the future: 1 sample(s) of host gpu-node-001 at 2200")
    assert 'Hostname="gpu-node-001"' in q["location"][0]


def test_a_future_sample_stored_before_the_rule_bounds_no_other_host(
    analyzed: Settings, tmp_path: Path
) -> None:
    # A warehouse written before samples from the future were refused holds one, and its
    # watermark with it: the cluster's data is then taken to reach no further than now, and a
    # running allocation ends at its own host's newest sample + one sampling interval.
    data = tmp_path / "wh"
    shutil.copytree(analyzed.data_dir, data)
    settings = analyzed.model_copy(update={"data_dir": data})
    before = _figures(data)
    wh = Warehouse(data)
    future = datetime(2200, 1, 1, tzinfo=UTC)
    one = wh.read("gpu_samples", "demo").filter(pl.col("host") == "gpu-node-001").head(1)
    one = one.with_columns(pl.lit(future).cast(pl.Datetime("us", "UTC")).alias("ts"))
    wh.replace_window("gpu_samples", "demo", future, future + timedelta(seconds=1), one, source="x")
    set_watermark(wh, "demo", "openmetrics", future)
    analyze(settings, quiet=True)
    after = _figures(data)
    step = Settings().thresholds.fallback_interval_s  # the bound's one sampling interval
    con = read_only_connection(data)
    try:
        running_allocs = con.sql(
            "select count(*) from job_gpu_usage g join job_usage j using (cluster, job_id) "
            "where j.running"
        ).fetchall()[0][0]
    finally:
        con.close()
    assert running_allocs > 0
    grown = after["totals"]["gpu_s"][0] - before["totals"]["gpu_s"][0]
    assert 0 <= grown <= running_allocs * step + 1e-6
    finished = before["jobs"].filter(~pl.col("running"))
    assert after["jobs"].filter(~pl.col("running")).equals(finished)


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
