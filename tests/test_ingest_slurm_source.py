"""The Slurm source end to end on a real warehouse: writes, re-runs, updates, GPU indices."""

from __future__ import annotations

import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from gpuwaste.cli import app
from gpuwaste.config import ClusterConfig, Settings, SlurmSource
from gpuwaste.errors import GpuwasteError
from gpuwaste.ingest.base import IngestError
from gpuwaste.ingest.gpu_indices import UNKNOWN_GPU
from gpuwaste.ingest.slurm.source import ingest_slurm
from gpuwaste.warehouse.bookkeeping import get_watermark
from gpuwaste.warehouse.store import Warehouse
from tests.conftest import FIXTURES

DATA = Path(__file__).parent / "data"
BERLIN = DATA / "sacct" / "berlin_quirks_parsable2.txt"
HEADER = (
    "JobID|JobIDRaw|JobName|User|Account|Partition|QOS|State|Submit|Start|End|AllocTRES|NodeList"
)


def cluster(**slurm: object) -> ClusterConfig:
    return ClusterConfig(name="c1", timezone="Europe/Berlin", slurm=SlurmSource(**slurm))  # type: ignore[arg-type]


def test_file_ingest_writes_jobs_job_gpus_quarantine_and_rerun_changes_nothing(
    data_dir: Path,
) -> None:
    s = Settings(data_dir=data_dir)
    r = ingest_slurm(s, cluster(file=BERLIN))
    wh = Warehouse(data_dir)
    jobs = wh.read("jobs", "c1")
    assert jobs.height == 12 and jobs["job_id"].n_unique() == 12
    assert r.accepted == 18 and len(r.refused) == 6
    q = wh.read("quarantine", "c1")
    assert q.height == 6 and set(q["batch"]) == {str(BERLIN)}
    assert {loc.rsplit(":", 1)[1] for loc in q["location"]} == {"19", "20", "21", "22", "23", "24"}
    jg = wh.read("job_gpus", "c1")
    # No scontrol, no telemetry: one row per host with gpu = -1 (index unknown).
    assert set(jg["gpu"]) == {UNKNOWN_GPU}
    one = jg.filter(pl.col("job_id") == "1007")
    assert sorted(one["host"]) == ["gpu-a1", "gpu-a2", "gpu-b3"]
    assert one["start_ts"][0] == datetime(2026, 3, 28, 9, 5, tzinfo=UTC)
    assert jg.filter(pl.col("job_id") == "1017").height == 0  # never started
    assert jg.filter(pl.col("job_id") == "1010")["end_ts"].to_list() == [None]
    before = {
        t: wh.read(t, "c1").drop("ingested_at", strict=False)
        for t in ("jobs", "job_gpus", "quarantine")
    }
    ingest_slurm(s, cluster(file=BERLIN))
    for t, df in before.items():
        assert wh.read(t, "c1").drop("ingested_at", strict=False).equals(df), t
    assert get_watermark(wh, "c1", "slurm") == datetime(
        2026, 3, 29, 4, 1, tzinfo=UTC
    )  # 1010+0 starts 06:01 CEST


def test_running_job_seen_again_completed_is_updated_not_duplicated(
    data_dir: Path, tmp_path: Path
) -> None:
    s = Settings(data_dir=data_dir)
    f = tmp_path / "sacct.txt"
    row = "77|77|train|alice|vision|gpu|normal|{state}|2026-11-01T10:00:00|2026-11-01T10:01:00|{end}|gres/gpu=2|node[1-2]"
    f.write_text(f"{HEADER}\n{row.format(state='RUNNING', end='Unknown')}\n")
    ingest_slurm(s, cluster(file=f))
    f.write_text(f"{HEADER}\n{row.format(state='COMPLETED', end='2026-11-01T12:00:00')}\n")
    ingest_slurm(s, cluster(file=f))
    wh = Warehouse(data_dir)
    jobs = wh.read("jobs", "c1")
    assert jobs.height == 1
    assert jobs["state"][0] == "passed" and jobs["end_ts"][0] == datetime(
        2026, 11, 1, 11, tzinfo=UTC
    )
    jg = wh.read("job_gpus", "c1")
    assert jg.height == 2 and set(jg["end_ts"]) == {datetime(2026, 11, 1, 11, tzinfo=UTC)}


def test_gpu_indices_from_scontrol(data_dir: Path) -> None:
    """With no telemetry yet, scontrol's IDX gives the GPU only where the operator says IDX is
    the index (gres_idx = "index"); by default (a minor number) the job waits for samples that
    carry minor numbers, its IDX kept in job_gpu_minors."""
    s = Settings(data_dir=data_dir)
    sc_file = DATA / "scontrol" / "two_jobs_show_job_d.txt"
    ingest_slurm(s, cluster(file=BERLIN, scontrol_file=sc_file))
    wh = Warehouse(data_dir)
    waiting = wh.read("job_gpus", "c1").filter(pl.col("job_id") == "1001")
    assert waiting.select("gpu", "gpu_from").rows() == [(UNKNOWN_GPU, "unknown")]
    kept = wh.read("job_gpu_minors", "c1").filter(pl.col("job_id") == "1001")
    assert sorted(kept["minor"].to_list()) == [0, 2, 3, 5]
    ingest_slurm(s, cluster(file=BERLIN, scontrol_file=sc_file, gres_idx="index"))
    jg = Warehouse(data_dir).read("job_gpus", "c1")
    assert set(jg.filter(pl.col("gpu") >= 0)["gpu_from"]) == {"scontrol"}
    got = {(h, g) for h, g in jg.filter(pl.col("job_id") == "1001").select("host", "gpu").rows()}
    assert got == {("node07", 0), ("node07", 2), ("node07", 3), ("node07", 5)}
    arr = jg.filter(
        pl.col("job_id") == "1007"
    )  # scontrol: JobId=1007 ArrayJobId=1003 ArrayTaskId=4
    assert sorted(arr["gpu"].to_list()) == [0, 0, 1, 1, 6, 7]
    assert jg.filter(pl.col("job_id") == "1012")["gpu"].to_list() == [UNKNOWN_GPU]
    q = Warehouse(data_dir).read("quarantine", "c1")
    assert q.filter(pl.col("reason").str.starts_with("bad node detail")).height == 1


def test_gpu_indices_from_hpc_job_labels_in_telemetry(data_dir: Path) -> None:
    wh = Warehouse(data_dir)
    t0 = datetime(2026, 3, 28, 9, 5, tzinfo=UTC)  # job 1007 (array task 1003_4) runs 09:05-11:05Z
    ts = [t0 + timedelta(seconds=15 * k) for k in range(10)]
    rows = []
    for host, gpu, job in [
        ("gpu-a1", 3, "1007"),
        ("gpu-a2", 5, "1007"),
        ("gpu-b3", 1, "1007"),
        ("gpu-b3", 2, "999"),
        ("node07", 1, "1001"),
    ]:
        rows += [
            {"host": host, "gpu": gpu, "ts": t, "util": 50.0, "job_id": job, "source": "x"}
            for t in ts
        ]
    # node07 samples labelled 1001 but *before* job 1001 started: not taken.
    wh.replace_window("gpu_samples", "c1", t0, t0 + timedelta(hours=1), pl.DataFrame(rows))
    ingest_slurm(Settings(data_dir=data_dir), cluster(file=BERLIN))
    jg = wh.read("job_gpus", "c1")
    got = {(h, g) for h, g in jg.filter(pl.col("job_id") == "1007").select("host", "gpu").rows()}
    assert got == {("gpu-a1", 3), ("gpu-a2", 5), ("gpu-b3", 1)}
    assert jg.filter(pl.col("job_id") == "1001")["gpu"].to_list() == [UNKNOWN_GPU]


def test_a_file_of_another_format_is_refused_before_anything_is_written(data_dir: Path) -> None:
    with pytest.raises(IngestError, match=r"cluster_gpu_util.*sacct"):
        ingest_slurm(
            Settings(data_dir=data_dir), cluster(file=DATA / "philly" / "cluster_gpu_util")
        )
    with pytest.raises(IngestError, match="does not exist"):
        ingest_slurm(Settings(data_dir=data_dir), cluster(file=DATA / "nope.txt"))
    assert not (data_dir / "parquet").exists()


def test_configured_command_runs_over_the_window_since_the_watermark(
    data_dir: Path, tmp_path: Path
) -> None:
    # A stand-in for the sacct binary that replays recorded output and logs its arguments
    # and environment (this machine has no Slurm).
    log = tmp_path / "argv.log"
    script = tmp_path / "sacct"
    script.write_text(f'#!/bin/sh\necho "$TZ $SLURM_TIME_FORMAT $*" >> {log}\ncat {BERLIN}\n')
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    s = Settings(data_dir=data_dir)
    c = cluster(command=[str(script), "--parsable2", "--allocations"])
    now = datetime(2026, 3, 30, 12, 0, tzinfo=UTC)
    r = ingest_slurm(s, c, now=now)
    assert r.accepted == 18
    wh = Warehouse(data_dir)
    assert get_watermark(wh, "c1", "slurm") == now
    ingest_slurm(s, c, now=now + timedelta(hours=1))
    calls = log.read_text().splitlines()
    # sacct runs with TZ=UTC: the window and the printed times are UTC.
    assert calls[0].startswith("UTC standard --parsable2 --allocations -S 2026-03-23T12:00:00")
    assert calls[0].endswith("-E 2026-03-30T12:00:00")
    assert "-S 2026-03-30T12:00:00 -E 2026-03-30T13:00:00" in calls[1]
    jobs = wh.read("jobs", "c1")
    assert jobs.height == 12
    start = jobs.filter(pl.col("job_id") == "1001")["start_ts"][0]
    assert start == datetime(2026, 3, 29, 0, 15, tzinfo=UTC)  # read as UTC, not Berlin
    failing = tmp_path / "sacct_fail"
    failing.write_text(
        "#!/bin/sh\necho 'sacct: error: Problem talking to the database' >&2\nexit 1\n"
    )
    failing.chmod(0o755)
    with pytest.raises(IngestError, match="Problem talking to the database"):
        ingest_slurm(s, cluster(command=[str(failing)]), now=now)


def test_one_off_cli(data_dir: Path) -> None:
    res = CliRunner().invoke(
        app,
        [
            "ingest",
            "slurm",
            "--file",
            str(BERLIN),
            "--cluster",
            "c9",
            "--timezone",
            "Europe/Berlin",
            "--data-dir",
            str(data_dir),
        ],
    )
    assert res.exit_code == 0, res.output
    assert "c9/slurm: 18 records accepted, 6 quarantined" in res.output
    assert Warehouse(data_dir).read("jobs", "c9").height == 12
    assert (data_dir / "gpuwaste.duckdb").exists()
    res = CliRunner().invoke(
        app, ["ingest", "slurm", "--file", str(BERLIN), "--data-dir", str(data_dir)]
    )
    # without --cluster the data has no cluster to go to: refused, and nothing more is written
    assert isinstance(res.exception, GpuwasteError)
    assert str(res.exception) == (
        "ingest slurm --file needs --cluster NAME to say which cluster the data is from."
    )
    assert Warehouse(data_dir).clusters("jobs") == ["c9"]


def test_a_job_without_gpus_holds_no_gpu_rows(data_dir: Path, tmp_path: Path) -> None:
    """CPU-only jobs (no GPU in AllocTRES / ReqTRES / AllocGRES) get no job_gpus rows; a GPU job
    of the same file still gets its per-host rows; a file without any GPU column says nothing
    about GPUs, so its jobs keep the index-unknown rows."""
    s = Settings(data_dir=data_dir)
    f = tmp_path / "sacct.txt"
    times = "2026-11-01T10:00:00|2026-11-01T10:01:00|2026-11-01T11:00:00"
    f.write_text(
        "JobID|JobIDRaw|User|Account|State|Submit|Start|End|AllocTRES|ReqTRES|NodeList\n"
        f"81|81|a|acc|COMPLETED|{times}|billing=4,cpu=4,mem=16G,node=1|cpu=4,mem=16G|cpu01\n"
        f"82|82|a|acc|COMPLETED|{times}|cpu=8,gres/gpu=2,mem=64G,node=2|cpu=8,gres/gpu=2|gpu[01-02]\n"
        f"83|83|a|acc|FAILED|{times}|cpu=1,node=1|cpu=1|cpu02\n"
    )
    ingest_slurm(s, cluster(file=f))
    wh = Warehouse(data_dir)
    jobs = wh.read("jobs", "c1").sort("job_id")
    assert jobs["gpus"].to_list() == [0, 2, 0]
    jg = wh.read("job_gpus", "c1")
    assert sorted(jg["job_id"]) == ["82", "82"] and sorted(jg["host"]) == ["gpu01", "gpu02"]
    g = tmp_path / "sacct_gres.txt"
    g.write_text(
        "JobID|State|Start|End|AllocGRES|NodeList\n"
        "91|COMPLETED|2026-11-01T10:01:00|2026-11-01T11:00:00||cpu03\n"
        "92|COMPLETED|2026-11-01T10:01:00|2026-11-01T11:00:00|gpu:1|gpu03\n"
    )
    ingest_slurm(s, cluster(file=g))
    assert sorted(wh.read("job_gpus", "c1")["job_id"]) == ["82", "82", "92"]
    h = tmp_path / "sacct_no_gpu_column.txt"
    h.write_text("JobID|State|Start|End|NodeList\n95|COMPLETED|2026-11-01T10:01:00||gpu04\n")
    ingest_slurm(s, cluster(file=h))
    unknown = wh.read("job_gpus", "c1").filter(pl.col("job_id") == "95")
    assert unknown["gpu"].to_list() == [UNKNOWN_GPU]
    r = tmp_path / "sacct_reqgres.txt"
    r.write_text(
        "JobID|State|Start|End|ReqGRES|NodeList\n"
        "96|COMPLETED|2026-11-01T10:01:00|2026-11-01T11:00:00||cpu05\n"
        "97|COMPLETED|2026-11-01T10:01:00|2026-11-01T11:00:00|gpu:tesla:2|gpu05\n"
    )
    ingest_slurm(s, cluster(file=r))
    jg = wh.read("job_gpus", "c1")
    assert sorted(jg.filter(pl.col("job_id").is_in(["96", "97"]))["job_id"]) == ["97"]
    assert wh.read("jobs", "c1").filter(pl.col("job_id") == "97")["gpus"].item() == 2


def test_real_captures_of_unstarted_jobs_ingest_cleanly(data_dir: Path) -> None:
    """Toil's `sacct -n -P --format JobIDRaw,State,ExitCode` and Princeton's `^|^` capture of a
    job cancelled while pending: every line accepted, each job recorded once without a start
    time (no Start column / never started), none holding GPU rows; a PENDING job is skipped."""
    s = Settings(data_dir=data_dir)
    toil = cluster(file=FIXTURES / "sacct" / "toil_astron_2021_P_noheader.txt",
                   columns=["JobIDRaw", "State", "ExitCode"])  # fmt: skip
    r = ingest_slurm(s, toil)
    assert (r.accepted, r.refused, r.note) == (22, [], "8 jobs, 1 pending skipped")
    princeton = ClusterConfig(
        name="p",
        slurm=SlurmSource(
            file=FIXTURES / "sacct" / "reportseff_princeton_cancelled_no_newline.txt",
            columns=["AllocCPUS", "Elapsed", "JobID", "JobIDRaw", "MaxRSS", "NNodes", "ReqMem",
                     "State", "Timelimit", "TotalCPU"],
        ),
    )  # fmt: skip
    r = ingest_slurm(s, princeton)
    assert (r.accepted, r.refused) == (1, [])
    wh = Warehouse(data_dir)
    jobs = wh.read("jobs").sort("cluster", "job_id")
    assert jobs.height == 9 and jobs["start_ts"].null_count() == 9
    assert "789868" not in jobs["job_id"].to_list()  # PENDING
    assert jobs.filter(pl.col("cluster") == "p").select("job_id", "state", "raw_state").row(0) == (
        "23000233", "killed", "CANCELLED by 129319"
    )  # fmt: skip
    assert set(jobs.filter(pl.col("cluster") == "c1")["state"]) == {
        "unsuccessful", "running", "passed"
    }  # fmt: skip
    assert wh.read("job_gpus").height == 0
