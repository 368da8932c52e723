"""Jobstats summaries in sacct's AdminComment through `ingest slurm` and `analyze`, on a real
warehouse and DuckDB: per-GPU figures and never-used GPUs with no telemetry at all, bad
summaries quarantined with their jobs kept, a gzip bomb refused, re-runs that change nothing,
and samples that win over a summary."""

from __future__ import annotations

import gzip
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from gpuwaste.analyses.run import analyze
from gpuwaste.config import ClusterConfig, Settings, SlurmSource
from gpuwaste.ingest.gpu_indices import UNKNOWN_GPU
from gpuwaste.ingest.slurm.source import ingest_slurm
from gpuwaste.ingest.slurm.summary_ties import summary_gpus
from gpuwaste.jobstats_summary import GpuSummary, JobSummary, NodeSummary, encode_summary
from gpuwaste.warehouse.store import Warehouse

HEADER = (
    "JobID|JobIDRaw|JobName|User|Account|Partition|QOS|State|Submit|Start|End|AllocTRES|NodeList"
    "|AdminComment"
)
T0 = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)
GIB = float(1 << 30)


def summary(*nodes: tuple[str, list[tuple[int, float, float]]]) -> str:
    """A summary of (host, [(minor, util %, memory used GiB)]) on 40 GiB GPUs, one hour."""
    return encode_summary(
        JobSummary(
            nodes=tuple(
                NodeSummary(
                    host,
                    gpus=tuple(GpuSummary(m, u, g * GIB, 40 * GIB) for m, u, g in gpus),
                    cpus=8,
                    cpu_time_s=1000.0,
                )
                for host, gpus in nodes
            ),
            total_time_s=3600,
            gpus=True,
        )
    )


def line(job: str, hosts: str, gpus: int, comment: str, state: str = "COMPLETED") -> str:
    fmt = "%Y-%m-%dT%H:%M:%S"
    start, end = T0.strftime(fmt), (T0 + timedelta(hours=1)).strftime(fmt)
    return (
        f"{job}|{job}|train|alice|vision|gpu|normal|{state}|{start}|{start}|{end}"
        f"|cpu=8,gres/gpu={gpus}|{hosts}|{comment}"
    )


def _js1_raw(data: bytes) -> str:
    import base64

    return "JS1:" + base64.b64encode(gzip.compress(data)).decode()


BOMB = _js1_raw(bytes(64 << 20))  # 64 MiB of zeros in about 64 KB
SACCT = [
    # two GPUs on one node: one at 62.5 %, one never used (0 %, nothing held)
    line("501", "gpu-a1", 2, summary(("gpu-a1", [(0, 62.5, 20.0), (1, 0.0, 0.0)]))),
    # two nodes; minor 3 at 0 % but holding 0.5 GiB: busy by the rule, not never used
    line(
        "502",
        "gpu-a[2-3]",
        2,
        summary(("gpu-a2", [(3, 0.0, 0.5)]), ("gpu-a3", [(2, 12.3, 7.0)])),
    ),
    line("503", "gpu-b1", 1, "JS1:not*base64"),
    line("504", "gpu-b2", 1, "JS1:" + "QUJDRA=="),  # base64 of "ABCD": not gzip
    line("505", "gpu-b3", 1, _js1_raw(b'{"nodes": {')),
    line("506", "gpu-b4", 1, _js1_raw(b'{"nodes": {"gpu-b4": {"gpu_utilization": {"gpu0": 5}}}}')),
    line("507", "gpu-b5", 1, BOMB),
    line("508", "gpu-b6", 1, "JS1:Short"),
    line("509", "gpu-b7", 1, ""),
]


def cluster(path: Path) -> ClusterConfig:
    return ClusterConfig(name="c", timezone="UTC", slurm=SlurmSource(file=path))


def _write(tmp: Path, lines: list[str]) -> Path:
    f = tmp / "sacct.txt"
    f.write_text("\n".join([HEADER, *lines]) + "\n")
    return f


@pytest.fixture(scope="module")
def ingested(tmp_path_factory: pytest.TempPathFactory) -> tuple[Settings, Path, Any]:
    tmp = tmp_path_factory.mktemp("jobstats")
    settings = Settings(data_dir=tmp / "warehouse")
    f = _write(tmp, SACCT)
    result = ingest_slurm(settings, cluster(f))
    analyze(settings, quiet=True)
    return settings, f, result


def usage(settings: Settings) -> pl.DataFrame:
    return Warehouse(settings.data_dir).read("job_gpu_usage", "c").sort("job_id", "host", "gpu")


def test_the_summaries_are_stored_per_gpu(ingested: tuple[Settings, Path, Any]) -> None:
    settings, _, _ = ingested
    wh = Warehouse(settings.data_dir)
    s = wh.read("job_gpu_summaries", "c").sort("job_id", "host", "gpu_minor")
    assert s.select("job_id", "host", "gpu_minor", "gpu", "util_pct", "mem_used_mib").rows() == [
        ("501", "gpu-a1", 0, 0, 62.5, 20480.0),
        ("501", "gpu-a1", 1, 1, 0.0, 0.0),
        ("502", "gpu-a2", 3, 3, 0.0, 512.0),
        ("502", "gpu-a3", 2, 2, 12.3, 7168.0),
    ]
    assert set(s["mem_total_mib"]) == {40960.0} and set(s["source"]) == {"jobstats-summary"}
    # no telemetry maps minor numbers to indices here: the job is tied to the minor numbers
    jg = wh.read("job_gpus", "c").sort("job_id", "host", "gpu")
    assert jg.filter(pl.col("job_id").is_in(["501", "502"])).select(
        "job_id", "host", "gpu"
    ).rows() == [
        ("501", "gpu-a1", 0),
        ("501", "gpu-a1", 1),
        ("502", "gpu-a2", 3),
        ("502", "gpu-a3", 2),
    ]
    summarized = jg.filter(pl.col("job_id").is_in(["501", "502"]))
    assert set(summarized["gpu_from"]) == {"jobstats-summary"}
    # the jobs without a summary keep a host-only allocation (index unknown)
    rest = jg.filter(~pl.col("job_id").is_in(["501", "502"]))
    assert set(rest["gpu"]) == {UNKNOWN_GPU} and rest.height == 7


def test_analyze_gives_the_summary_figures_with_no_telemetry(
    ingested: tuple[Settings, Path, Any],
) -> None:
    settings, _, _ = ingested
    u = usage(settings).filter(pl.col("job_id").is_in(["501", "502"]))
    got = u.select(
        "job_id", "host", "gpu", "util_mean", "never_used", "never_used_s", "busy_s", "missing_s"
    ).rows()
    assert got == [
        ("501", "gpu-a1", 0, 62.5, False, 0.0, 3600.0, 0.0),
        ("501", "gpu-a1", 1, 0.0, True, 3600.0, 0.0, 0.0),
        ("502", "gpu-a2", 3, 0.0, False, 0.0, 3600.0, 0.0),
        ("502", "gpu-a3", 2, 12.3, False, 0.0, 3600.0, 0.0),
    ]
    assert set(u["figures_from"]) == {"jobstats-summary"}
    assert u["mem_used_max_mib"].to_list() == [20480.0, 0.0, 512.0, 7168.0]
    # nothing a mean cannot tell: no peak utilization, mean memory, idle slots, phases
    for col in ("util_max", "mem_used_mean_mib", "idle_slots", "n_phases", "interval_s"):
        assert u[col].null_count() == u.height, col
    assert set(u["idle_slot_s"]) == {0.0} and not u["low_data"].any()
    jobs = Warehouse(settings.data_dir).read("job_usage", "c").sort("job_id")
    j501 = jobs.filter(pl.col("job_id") == "501").row(0, named=True)
    assert j501["util_mean"] == pytest.approx(31.25)
    assert j501["never_used_gpus"] == 1 and j501["never_used_gpu_s"] == 3600.0
    assert j501["idle_slots"] is None and j501["n_phases"] is None  # a mean tells none
    assert j501["is_debug"] is False and j501["low_data"] is False


def test_bad_summaries_are_quarantined_with_reasons_and_their_jobs_kept(
    ingested: tuple[Settings, Path, Any],
) -> None:
    settings, f, result = ingested
    wh = Warehouse(settings.data_dir)
    assert sorted(wh.read("jobs", "c")["job_id"]) == [str(n) for n in range(501, 510)]
    q = wh.read("quarantine", "c").sort("location")
    reasons = dict(zip(q["location"], q["reason"], strict=True))
    prefix = "Jobstats summary in AdminComment not decoded: "
    bomb = reasons.pop(f"{f}:8")
    assert bomb.startswith(prefix + "decompresses to more than ") and "likely gzip bomb" in bomb
    assert {loc.rsplit(":", 1)[1]: r.removeprefix(prefix) for loc, r in reasons.items()} == {
        "4": "bad base64",
        "5": "bad gzip (Error -3 while decompressing data: incorrect header check)",
        "6": "not JSON (Expecting property name enclosed in double quotes: line 1 column 12 (char 11))",
        "7": "wrong shape: GPU 'gpu0' in nodes.gpu-b4.gpu_utilization is not a minor number",
    }
    assert all(r.startswith(prefix) for r in reasons.values())
    assert result.accepted == 9 and len(result.refused) == 5
    assert "4 GPUs with a Jobstats summary" in result.note
    # the quarantined jobs and the ones without a summary have no figures: all missing
    u = usage(settings).filter(~pl.col("job_id").is_in(["501", "502"]))
    assert u.height == 0  # host-only allocations with no samples give no GPU rows


def test_rerunning_changes_nothing(ingested: tuple[Settings, Path, Any]) -> None:
    settings, f, _ = ingested
    wh = Warehouse(settings.data_dir)
    tables = ("jobs", "job_gpus", "job_gpu_summaries", "quarantine")
    before = {t: wh.read(t, "c").drop("ingested_at", strict=False) for t in tables}
    gpu_before = usage(settings)
    ingest_slurm(settings, cluster(f))
    analyze(settings, quiet=True)
    for t, df in before.items():
        assert (
            wh.read(t, "c")
            .drop("ingested_at", strict=False)
            .sort(df.columns)
            .equals(df.sort(df.columns))
        ), t
    assert usage(settings).equals(gpu_before)


def test_samples_win_over_a_summary(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "warehouse")
    wh = Warehouse(settings.data_dir)
    # samples of gpu-c1's GPU 0 labelled with job 601, at 90 %, every 30 s of the hour
    ts = [T0 + timedelta(seconds=30 * i) for i in range(121)]
    samples = pl.DataFrame(
        {
            "host": "gpu-c1",
            "gpu": 0,
            "ts": ts,
            "util": 90.0,
            "mem_used_mib": 30000.0,
            "mem_total_mib": 40960.0,
            "job_id": "601",
        }
    ).with_columns(pl.col("ts").dt.cast_time_unit("us"), pl.col("gpu").cast(pl.Int16))
    wh.replace_window("gpu_samples", "c", ts[0], ts[-1] + timedelta(seconds=1), samples)
    f = _write(tmp_path, [line("601", "gpu-c1", 1, summary(("gpu-c1", [(0, 10.0, 1.0)])))])
    ingest_slurm(settings, cluster(f))
    analyze(settings, quiet=True)
    row = usage(settings).row(0, named=True)
    assert (row["host"], row["gpu"], row["figures_from"]) == ("gpu-c1", 0, "samples")
    assert row["util_mean"] == pytest.approx(90.0) and row["mem_used_max_mib"] == 30000.0
    assert row["idle_slots"] == 0 and row["interval_s"] == 30.0


def test_a_summary_that_changes_recomputes_its_job(tmp_path: Path) -> None:
    """The same allocation (scontrol would give the same GPUs) with a new summary: the job's
    fingerprint changes with its summary, so analyze recomputes it."""
    settings = Settings(data_dir=tmp_path / "warehouse")
    first = summary(("gpu-d1", [(0, 40.0, 2.0)]))
    f = _write(tmp_path, [line("701", "gpu-d1", 1, first)])
    ingest_slurm(settings, cluster(f))
    analyze(settings, quiet=True)
    assert usage(settings)["util_mean"].to_list() == [40.0]
    _write(tmp_path, [line("701", "gpu-d1", 1, summary(("gpu-d1", [(0, 0.0, 0.0)])))])
    ingest_slurm(settings, cluster(f))
    assert analyze(settings, quiet=True)[0].jobs_recomputed == 1
    row = usage(settings).row(0, named=True)
    assert (row["util_mean"], row["never_used"], row["never_used_s"]) == (0.0, True, 3600.0)


def test_minor_numbers_become_indices_only_where_nothing_contradicts() -> None:
    """summary_ties' three rules: the samples' index for a minor number they carry; no tie where
    the host's samples carry no minor numbers (unless gres_idx = "index"); the minor number on a
    host without samples."""
    host_gpus = pl.DataFrame(
        {
            "host": ["m", "m", "n", "n"],
            "gpu": [0, 1, 0, 1],
            "gpu_minor": [1, 0, None, None],  # host m: minor 1 is index 0
            "mig": [False] * 4,
        },
        schema={"host": pl.String, "gpu": pl.Int16, "gpu_minor": pl.Int16, "mig": pl.Boolean},
    )
    rows = pl.DataFrame(
        {"host": ["m", "m", "m", "n", "x"], "gpu_minor": [0, 1, 5, 1, 3]},
        schema={"host": pl.String, "gpu_minor": pl.Int16},
    )
    assert summary_gpus(rows, host_gpus, "minor").to_list() == [1, 0, None, None, 3]
    assert summary_gpus(rows, host_gpus, "index").to_list() == [1, 0, None, 1, 3]


def test_a_summary_minor_number_is_joined_to_the_index_its_samples_show(tmp_path: Path) -> None:
    """Telemetry whose samples carry minor numbers, no job label: on gpu-e1 index 0 is minor 1.
    The job's summary names minor 1, so the job holds index 0, whose samples then win."""
    settings = Settings(data_dir=tmp_path / "warehouse")
    wh = Warehouse(settings.data_dir)
    ts = [T0 + timedelta(seconds=30 * i) for i in range(121)]
    frames = [
        pl.DataFrame(
            {
                "host": "gpu-e1",
                "gpu": gpu,
                "gpu_minor": minor,
                "ts": ts,
                "util": util,
                "mem_used_mib": 5000.0,
                "mem_total_mib": 40960.0,
            }
        )
        for gpu, minor, util in ((0, 1, 70.0), (1, 0, 0.0))
    ]
    samples = pl.concat(frames).with_columns(
        pl.col("ts").dt.cast_time_unit("us"), pl.col("gpu", "gpu_minor").cast(pl.Int16)
    )
    wh.replace_window("gpu_samples", "c", ts[0], ts[-1] + timedelta(seconds=1), samples)
    f = _write(tmp_path, [line("801", "gpu-e1", 1, summary(("gpu-e1", [(1, 10.0, 1.0)])))])
    ingest_slurm(settings, cluster(f))
    jg = wh.read("job_gpus", "c")
    assert jg.select("host", "gpu", "gpu_from").rows() == [("gpu-e1", 0, "jobstats-summary")]
    assert wh.read("job_gpu_summaries", "c").select("gpu_minor", "gpu").rows() == [(1, 0)]
    analyze(settings, quiet=True)
    row = usage(settings).row(0, named=True)
    assert (row["gpu"], row["figures_from"], row["util_mean"]) == (0, "samples", 70.0)


def test_summary_hosts_are_named_as_the_nodelist_names_them() -> None:
    """Jobstats names a node as Prometheus' instance label does: a domain is dropped where the
    short name is the job's; a node that is not the job's is quarantined, the others kept."""
    from gpuwaste.ingest.slurm.parse import parse_sacct

    text = "\n".join(
        [
            HEADER,
            line(
                "901",
                "gpu-f[1-2]",
                2,
                summary(
                    ("gpu-f1.example.org", [(0, 50.0, 1.0)]),
                    ("gpu-f2", [(1, 60.0, 1.0)]),
                    ("gpu-z9", [(0, 70.0, 1.0)]),
                ),
            ),
        ]
    )
    p = parse_sacct(text)
    assert p.gpu_summaries.select("host", "gpu_minor").rows() == [("gpu-f1", 0), ("gpu-f2", 1)]
    assert [r.reason for r in p.refused] == [
        "Jobstats summary in AdminComment names hosts not in the job's NodeList: gpu-z9 "
        "(their GPUs left out)"
    ]
    assert p.jobs["job_id"].to_list() == ["901"]
