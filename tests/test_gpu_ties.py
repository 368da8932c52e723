"""Slurm jobs tied to their GPUs where no telemetry label names the job (#43 item 2).

A generated cluster (16 GPUs, 6 hours) whose samples carry no job id (the DCGM exporter's
default), its sacct file, and the planted allocations (`job_gpus_frame`) as the truth:
- jobs holding every GPU of their hosts are tied without anything else (`whole-host`), whichever
  of the sacct file and the telemetry is ingested first, and `analyze` finds GPU-seconds;
- `scontrol show job -d` captures (a folder, and a real executable standing in for scontrol at
  each ingest) tie every job they saw running exactly, by the GPUs' minor numbers;
- an IDX naming a GPU the host does not have is quarantined; where the samples carry no minor
  number the job waits unless `gres_idx = "index"`, and the summary says so.
"""

from __future__ import annotations

import os
import re
import stat
from datetime import datetime, timedelta
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from gpuwaste.cli import app
from gpuwaste.config import ClusterConfig, Settings, SlurmSource
from gpuwaste.generate import GeneratorSpec, job_gpus_frame, jobs_frame, simulate, write_all
from gpuwaste.generate.parquet import write_samples_parquet
from gpuwaste.ingest.base import IngestError
from gpuwaste.ingest.gpu_indices import UNKNOWN_GPU, fill_unknown_gpus
from gpuwaste.ingest.slurm.captures import capture_dir
from gpuwaste.ingest.slurm.source import ingest_slurm
from gpuwaste.warehouse.store import Warehouse

SPEC = GeneratorSpec(seed=0, gpus=16, days=0.25, cluster="t", timezone="UTC")
END = SPEC.start + timedelta(seconds=SPEC.duration_s)
CAPTURE_EVERY = timedelta(minutes=5)
KEY = ["job_id", "host", "gpu"]


def minor_of(host: str, gpu: int) -> int:
    """The planted device minor number: equal to the index on odd hosts, reversed on even ones
    (as where gres.conf lists /dev/nvidiaN in another order than NVML)."""
    return 7 - gpu if int(host[-1]) % 2 == 0 else gpu


class Cluster:
    def __init__(self, out: Path) -> None:
        write_all(SPEC, out)
        write_samples_parquet(SPEC, out / "samples")
        self.sacct = out / "sacct.txt"
        # the exporter's default: no hpc_job label (as `generate --no-job-labels` writes it)
        self.metrics = out / "no_labels.om"
        text = (out / "metrics.om").read_text()
        self.metrics.write_text(re.sub(r',?hpc_job="[^"]*"', "", text).replace("{,", "{"))
        raw = pl.read_parquet(sorted((out / "samples").glob("date=*/*.parquet")))
        self.samples = raw.with_columns(pl.lit(None, dtype=pl.String()).alias("job_id")).unique(
            ["host", "gpu", "ts"]
        )
        truth = simulate(SPEC)
        self.truth = job_gpus_frame(truth).select(KEY).sort(KEY)
        jobs = jobs_frame(truth).filter(pl.col("start_ts").is_not_null())
        per_job = self.truth.group_by("job_id").agg(pl.col("host").unique().alias("hosts"))
        host_gpus = self.samples.group_by("host").agg(pl.col("gpu").n_unique().alias("n"))
        sizes = per_job.explode("hosts").join(host_gpus, left_on="hosts", right_on="host")
        whole = sizes.group_by("job_id").agg(pl.col("n").sum()).join(jobs, on="job_id")
        self.whole = set(whole.filter(pl.col("n") == pl.col("gpus"))["job_id"])
        self.jobs = jobs


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Cluster:
    return Cluster(tmp_path_factory.mktemp("ties"))


def write_samples(wh: Warehouse, c: Cluster, minors: bool = False) -> None:
    """The samples, with the GPUs' minor numbers (as DCGM's device="nvidiaN" gives them) or
    without (as the nvidia-smi exporter's)."""
    rows = c.samples
    if minors:
        minor = [minor_of(h, g) for h, g in zip(rows["host"], rows["gpu"], strict=True)]
        rows = rows.with_columns(pl.Series("gpu_minor", minor, dtype=pl.Int16()))
    wh.replace_window("gpu_samples", SPEC.cluster, SPEC.start, END, rows, source="gen")


def slurm(**kw: object) -> ClusterConfig:
    return ClusterConfig(name=SPEC.cluster, slurm=SlurmSource(**kw))  # type: ignore[arg-type]


def tied(wh: Warehouse) -> pl.DataFrame:
    return wh.read("job_gpus", SPEC.cluster).select(*KEY, "gpu_from").sort(KEY)


def capture_text(c: Cluster, at: datetime, minor: bool = True) -> str:
    """`scontrol show job -d` at `at`: a record per running job, IDX as Slurm prints it."""
    running = c.jobs.filter(
        (pl.col("start_ts") <= at) & (pl.col("end_ts").is_null() | (pl.col("end_ts") > at))
    )["job_id"]
    out = []
    for job in sorted(running):
        out.append(f"JobId={job} JobName=train\n   JobState=RUNNING Reason=None Dependency=(null)")
        rows = c.truth.filter(pl.col("job_id") == job)
        for host in sorted(set(rows["host"])):
            gpus = rows.filter(pl.col("host") == host)["gpu"].to_list()
            idx = sorted(minor_of(host, g) if minor else g for g in gpus)
            out.append(
                f"     Nodes={host} CPU_IDs=0-7 Mem=0 "
                f"GRES=gpu:{len(idx)}(IDX:{','.join(map(str, idx))})"
            )
        out.append("")
    return "\n".join(out)


def captures(c: Cluster, folder: Path, minor: bool = True) -> Path:
    folder.mkdir()
    at = SPEC.start
    while at < END:
        (folder / f"{at:%Y%m%dT%H%M}.txt").write_text(capture_text(c, at, minor))
        at += CAPTURE_EVERY
    return folder


def test_whole_host_jobs_are_tied_without_captures_in_either_order(
    cluster: Cluster, tmp_path: Path
) -> None:
    assert len(cluster.whole) >= 3  # the reproduction's point: some jobs hold whole hosts
    want = cluster.truth.filter(pl.col("job_id").is_in(cluster.whole))
    # telemetry first, then sacct
    first = Warehouse(tmp_path / "a")
    write_samples(first, cluster)
    r = ingest_slurm(Settings(data_dir=first.data_dir), slurm(file=cluster.sacct))
    assert f"{want.height} whole-host" in r.note, r.note
    a = tied(first)
    assert a.filter(pl.col("gpu_from") == "whole-host").drop("gpu_from").equals(want)
    assert set(a.filter(pl.col("gpu") == UNKNOWN_GPU)["gpu_from"]) == {"unknown"}
    unknown = set(a.filter(pl.col("gpu") == UNKNOWN_GPU)["job_id"])
    assert unknown and not unknown & cluster.whole
    # sacct first, then the telemetry resolves the same rows (as a telemetry ingest does)
    second = Warehouse(tmp_path / "b")
    ingest_slurm(Settings(data_dir=second.data_dir), slurm(file=cluster.sacct))
    assert set(tied(second)["gpu"]) == {UNKNOWN_GPU}
    write_samples(second, cluster)
    assert fill_unknown_gpus(second, SPEC.cluster, SPEC.start, END) == len(cluster.whole)
    assert tied(second).equals(a)


def test_the_issue_reproduction_now_finds_gpu_seconds(cluster: Cluster, tmp_path: Path) -> None:
    """The issue's commands: ingest slurm (sacct file, no scontrol) + ingest openmetrics (no
    job label) + analyze, through the command line."""
    assert "hpc_job" not in cluster.metrics.read_text()
    args = ["--cluster", "t", "--data-dir", str(tmp_path / "wh")]
    runner = CliRunner()
    for cmd in (
        ["ingest", "slurm", "--file", str(cluster.sacct), *args],
        ["ingest", "openmetrics", "--file", str(cluster.metrics), *args],
        ["analyze", "--data-dir", str(tmp_path / "wh")],
    ):
        res = runner.invoke(app, cmd)
        assert res.exit_code == 0, res.output
    assert "0 GPU-seconds" not in res.output
    usage = Warehouse(tmp_path / "wh").read("job_gpu_usage", SPEC.cluster)
    want = cluster.truth.filter(pl.col("job_id").is_in(cluster.whole))
    assert usage.select(KEY).sort(KEY).equals(want)
    assert usage["alloc_s"].sum() > 0


def test_captures_tie_every_captured_job_exactly_by_minor_number(
    cluster: Cluster, tmp_path: Path
) -> None:
    wh = Warehouse(tmp_path / "wh")
    write_samples(wh, cluster, minors=True)
    folder = captures(cluster, tmp_path / "scontrol")
    r = ingest_slurm(
        Settings(data_dir=wh.data_dir), slurm(file=cluster.sacct, scontrol_file=folder)
    )
    assert r.refused == []
    got = tied(wh)
    seen = {
        line.split()[0].removeprefix("JobId=")
        for f in folder.iterdir()
        for line in f.read_text().splitlines()
        if line.startswith("JobId=")
    }
    # whole-host comes first: a whole-host job keeps that provenance even when captured
    assert set(got.filter(pl.col("gpu_from") == "whole-host")["job_id"]) == cluster.whole
    by_capture = got.filter(pl.col("gpu_from") == "scontrol")
    assert set(by_capture["job_id"]) == seen - cluster.whole
    captured = cluster.truth.filter(pl.col("job_id").is_in(seen | cluster.whole))
    assert got.filter(pl.col("gpu") >= 0).drop("gpu_from").equals(captured)
    # a job between two captures is missed: it stays unknown (counted, never idle)
    missed = set(got.filter(pl.col("gpu") == UNKNOWN_GPU)["job_id"])
    assert missed == set(cluster.truth["job_id"]) - seen - cluster.whole
    # joined by minor number, not index: the even hosts' IDX differ from their indices
    assert by_capture.filter(pl.col("host").str.ends_with("2")).height > 0
    assert (
        wh.read("job_gpu_minors", SPEC.cluster)
        .join(by_capture.select("job_id").unique(), on="job_id", how="semi")
        .is_empty()
    )  # resolved: no longer kept


def test_without_minor_numbers_a_capture_waits_unless_gres_idx_says_index(
    cluster: Cluster, tmp_path: Path
) -> None:
    wh = Warehouse(tmp_path / "wh")
    write_samples(wh, cluster)  # telemetry without minor numbers (nvidia-smi exporter)
    folder = captures(cluster, tmp_path / "scontrol", minor=False)
    s = Settings(data_dir=wh.data_dir)
    r = ingest_slurm(s, slurm(file=cluster.sacct, scontrol_file=folder))
    assert "carry no GPU minor number" in r.note and 'gres_idx = "index"' in r.note, r.note
    assert set(tied(wh).filter(pl.col("gpu") >= 0)["gpu_from"]) == {"whole-host"}
    r = ingest_slurm(s, slurm(file=cluster.sacct, scontrol_file=folder, gres_idx="index"))
    assert "carry no GPU minor number" not in r.note
    by_index = tied(wh).filter(pl.col("gpu_from") == "scontrol").drop("gpu_from")
    assert by_index.height and by_index.join(cluster.truth, on=KEY, how="anti").is_empty()


def test_an_idx_naming_a_gpu_the_host_lacks_is_quarantined(
    cluster: Cluster, tmp_path: Path
) -> None:
    wh = Warehouse(tmp_path / "wh")
    write_samples(wh, cluster, minors=True)
    job = cluster.jobs.filter(~pl.col("job_id").is_in(cluster.whole))["job_id"][0]
    host = cluster.truth.filter(pl.col("job_id") == job)["host"][0]
    sc = tmp_path / "sc.txt"
    sc.write_text(f"JobId={job} JobName=x\n     Nodes={host} CPU_IDs=0 Mem=0 GRES=gpu:1(IDX:9)\n")
    r = ingest_slurm(Settings(data_dir=wh.data_dir), slurm(file=cluster.sacct, scontrol_file=sc))
    assert [x.reason for x in r.refused] == [
        f"Slurm IDX 9 names no GPU of host {host} (its samples show minor numbers "
        "0, 1, 2, 3, 4, 5, 6, 7)"
    ]
    q = wh.read("quarantine", SPEC.cluster)
    assert q.filter(pl.col("reason").str.starts_with("Slurm IDX 9")).height == 1
    assert tied(wh).filter(pl.col("job_id") == job)["gpu"].to_list() == [UNKNOWN_GPU]


def fake_scontrol(bin_dir: Path, capture: Path) -> None:
    """A real executable named scontrol on PATH that prints the capture file's current text."""
    bin_dir.mkdir()
    exe = bin_dir / "scontrol"
    exe.write_text(
        "#!/bin/sh\n"
        '[ "$1 $2 $3 $4" = "show job -d " ] || { echo "usage: scontrol show job -d" >&2; exit 2; }\n'
        f'cat "{capture}"\n'
    )
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)


def test_a_job_seen_running_by_one_capture_and_gone_in_the_next_is_tied(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two scheduled ingests with a real `scontrol` on PATH: the first captures the job running,
    by the second slurmctld has forgotten it and sacct says it completed. The telemetry comes
    last (a Prometheus ingest behind the scheduler's): the kept IDX resolve then."""
    wh = Warehouse(tmp_path / "wh")
    job = cluster.jobs.filter(~pl.col("job_id").is_in(cluster.whole)).row(0, named=True)
    capture = tmp_path / "now.txt"
    fake_scontrol(tmp_path / "bin", capture)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    lines = cluster.sacct.read_text().splitlines()
    header, line = lines[0], next(ln for ln in lines if ln.startswith(f"{job['job_id']}|"))
    fields = dict(zip(header.split("|"), line.split("|"), strict=True))
    running = {**fields, "State": "RUNNING", "End": "Unknown"}
    sacct = tmp_path / "sacct.txt"
    s = Settings(data_dir=wh.data_dir)
    cfg = slurm(file=sacct, scontrol_command=["scontrol", "show", "job", "-d"])
    stored = capture_dir(wh.data_dir, SPEC.cluster)
    # ingest 1: the job runs, the capture sees it and is kept under the data dir
    sacct.write_text(f"{header}\n{'|'.join(running.values())}\n")
    capture.write_text(capture_text(cluster, job["start_ts"] + timedelta(seconds=1)))
    ingest_slurm(s, cfg, now=job["start_ts"] + timedelta(seconds=2))
    assert len(list(stored.glob("scontrol-*.txt"))) == 1
    # ingest 2: slurmctld has forgotten it; sacct says it completed
    sacct.write_text(f"{header}\n{line}\n")
    capture.write_text("")
    later = job["end_ts"] + timedelta(minutes=10)
    ingest_slurm(s, cfg, now=later)
    assert tied(wh).filter(pl.col("job_id") == job["job_id"])["gpu"].to_list() == [UNKNOWN_GPU]
    # the telemetry arrives: the kept IDX name the GPUs by their minor numbers
    write_samples(wh, cluster, minors=True)
    fill_unknown_gpus(wh, SPEC.cluster, SPEC.start, END)
    want = cluster.truth.filter(pl.col("job_id") == job["job_id"])
    got = tied(wh).filter(pl.col("job_id") == job["job_id"])
    assert got.drop("gpu_from").equals(want) and set(got["gpu_from"]) == {"scontrol"}
    # the next ingest prunes the captures whose jobs are resolved; re-running changes nothing
    ingest_slurm(s, cfg, now=later + timedelta(minutes=5))
    assert not list(stored.glob("scontrol-*.txt"))
    assert tied(wh).filter(pl.col("job_id") == job["job_id"]).equals(got)


def test_a_failing_scontrol_command_is_one_sentence_naming_it(tmp_path: Path) -> None:
    bad = tmp_path / "scontrol-broken"
    bad.write_text(
        "#!/bin/sh\necho 'slurm_load_jobs error: Unable to contact slurm controller' >&2\nexit 1\n"
    )
    bad.chmod(0o755)
    sacct = tmp_path / "sacct.txt"
    sacct.write_text("JobID|State|Start|End|AllocTRES|NodeList\n")
    s = Settings(data_dir=tmp_path / "wh")
    with pytest.raises(IngestError, match=r"the scontrol command '.*scontrol-broken' failed: "
                       r"slurm_load_jobs error: Unable to contact slurm controller"):  # fmt: skip
        ingest_slurm(s, slurm(file=sacct, scontrol_command=[str(bad)]))
    with pytest.raises(IngestError, match="the scontrol command 'no-such-scontrol' was not found"):
        ingest_slurm(s, slurm(file=sacct, scontrol_command=["no-such-scontrol"]))


def test_the_overview_figure_of_gpu_hours_not_tied_to_a_gpu(
    cluster: Cluster, tmp_path: Path
) -> None:
    """The jobs left unknown (never idle, left out of the analyses) in GPU hours, as the
    Overview shows them: each such job's GPUs x its run time, hand-computed from the truth."""
    from gpuwaste.dashboard import queries as q
    from gpuwaste.dashboard.filters import Filters
    from gpuwaste.warehouse.catalog import connect

    wh = Warehouse(tmp_path / "wh")
    write_samples(wh, cluster)
    ingest_slurm(Settings(data_dir=wh.data_dir), slurm(file=cluster.sacct))
    res = CliRunner().invoke(app, ["analyze", "--data-dir", str(wh.data_dir)])
    assert res.exit_code == 0, res.output
    left = cluster.jobs.filter(~pl.col("job_id").is_in(cluster.whole))
    # a job still running at the end of the sacct file counts up to the newest time it shows
    reach = cluster.jobs.select(pl.max_horizontal("submit_ts", "start_ts", "end_ts").max()).item()
    end = pl.col("end_ts").fill_null(reach)
    assert left["end_ts"].null_count() > 0
    want = left.select((pl.col("gpus") * (end - pl.col("start_ts")).dt.total_seconds()).sum())
    want = want.item() / 3600
    con = connect(wh.data_dir)
    try:
        row = q.unresolved_gpu_hours(con, Filters()).row(0, named=True)
        assert row["jobs"] == left.height
        assert row["unresolved_gpu_h"] == pytest.approx(want)
        # the period filter counts each job's time within the period only
        day = Filters(start=SPEC.start.date(), end=SPEC.start.date())
        assert q.unresolved_gpu_hours(con, day)["unresolved_gpu_h"][0] == pytest.approx(want)
        other = Filters(cluster="elsewhere")
        assert q.unresolved_gpu_hours(con, other).row(0) == (0.0, 0)
    finally:
        con.close()
