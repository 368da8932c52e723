"""Job-local GPU indices (slurm-job-exporter's `gpu`) -> devices of the host
(gpuwaste/ingest/job_local_gpus.py): hand-computed cases, the pure placement and through the
real file source and warehouse, Slurm's records stored before the telemetry."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl

from gpuwaste.analyses.run import analyze
from gpuwaste.config import ClusterConfig, OpenMetricsSource, Settings, SlurmSource
from gpuwaste.generate import GeneratorSpec, write_all
from gpuwaste.ingest.gpu_indices import JOB_GPUS_KEY
from gpuwaste.ingest.job_local_gpus import JOB_LOCAL_BASE, SLOT_GPUS, JobLocalPlacer
from gpuwaste.ingest.prometheus.openmetrics_source import ingest_openmetrics
from gpuwaste.ingest.slurm.source import ingest_slurm
from gpuwaste.warehouse import gpu_from
from gpuwaste.warehouse.catalog import connect
from gpuwaste.warehouse.store import Warehouse

T0 = datetime(2026, 10, 31, 12, 0, tzinfo=UTC)
MODEL = "NVIDIA A100-SXM4-40GB"


def _rows(samples: list[tuple[str, str, int, datetime]]) -> pl.DataFrame:
    """gpu_samples-like rows: (host, job, the job's own GPU index, ts)."""
    return pl.DataFrame(
        samples,
        schema={
            "host": pl.String,
            "job_id": pl.String,
            "gpu": pl.Int16,
            "ts": pl.Datetime("us", "UTC"),
        },
        orient="row",
    )


def _gpus(frame: pl.DataFrame) -> list[tuple[str, str, int]]:
    return sorted(frame.select("host", "job_id", "gpu").unique().iter_rows())


def test_two_jobs_at_once_each_local_gpu_0_go_to_the_gpus_slurm_named() -> None:
    # job 1 holds GPUs 3 and 6 of h (its own 0 and 1), job 2 GPU 1 (its own 0): at the same time
    placer = JobLocalPlacer(known={("h", "1"): [3, 6], ("h", "2"): [1]})
    rows = _rows([("h", "1", 0, T0), ("h", "1", 1, T0), ("h", "2", 0, T0)])
    assert _gpus(placer.place(rows)) == [("h", "1", 3), ("h", "1", 6), ("h", "2", 1)]
    assert "2 job-host pair(s) placed on the host's GPUs Slurm named, 0 kept" in placer.note()


def test_unknown_gpus_are_kept_apart_per_job() -> None:
    """No Slurm record names the GPUs: each (job, host) a slot of its own while it runs; a slot
    is free again an hour (MARGIN) after its job's last sample; slots are per host."""
    placer = JobLocalPlacer()
    later = T0 + timedelta(hours=3)
    first = placer.place(
        _rows(
            [
                ("h", "1", 0, T0),
                ("h", "1", 1, T0 + timedelta(minutes=1)),
                ("h", "2", 0, T0 + timedelta(seconds=30)),
                ("g", "4", 0, T0 + timedelta(minutes=5)),
            ]
        )
    )
    slot0, slot1 = JOB_LOCAL_BASE, JOB_LOCAL_BASE + SLOT_GPUS
    assert _gpus(first) == [
        ("g", "4", slot0),
        ("h", "1", slot0),
        ("h", "1", slot0 + 1),
        ("h", "2", slot1),
    ]
    # a later window: job 1 keeps its devices, job 3 starts 3 h after job 2's last sample while
    # job 1 still runs: slot 1 again
    second = placer.place(_rows([("h", "1", 0, later), ("h", "3", 0, later)]))
    assert _gpus(second) == [("h", "1", slot0), ("h", "3", slot1)]
    assert "0 job-host pair(s) placed on the host's GPUs Slurm named, 4 kept" in placer.note()


def test_a_job_keeps_its_own_devices_once_given() -> None:
    """Slurm's record of job 1 arrives between two windows: its later samples stay on the
    devices of its earlier ones (one job, one kind of device), a new job takes the record."""
    placer = JobLocalPlacer()
    assert _gpus(placer.place(_rows([("h", "1", 0, T0)]))) == [("h", "1", JOB_LOCAL_BASE)]
    placer.known = {("h", "1"): [5], ("h", "2"): [2]}
    later = T0 + timedelta(minutes=10)
    got = placer.place(_rows([("h", "1", 0, later), ("h", "2", 0, later)]))
    assert _gpus(got) == [("h", "1", JOB_LOCAL_BASE), ("h", "2", 2)]


def _exposition(path: Path, samples: list[tuple[str, int, datetime, float]]) -> Path:
    """slurm-job-exporter's per-job GPU series (names and labels as its README sample,
    tests/fixtures/exporter_text/slurm_job_exporter_readme_sample.prom): (job, gpu, ts, util)."""
    lines = ["# TYPE slurm_job_utilization_gpu gauge"]
    for job, gpu, ts, util in samples:
        labels = f'account="a",gpu="{gpu}",gpu_type="{MODEL}",slurmjobid="{job}",user="u"'
        lines.append(f"slurm_job_utilization_gpu{{{labels}}} {util} {int(ts.timestamp() * 1000)}")
    lines.append("# TYPE slurm_job_memory_usage_gpu gauge")
    for job, gpu, ts, _ in samples:
        labels = f'account="a",gpu="{gpu}",gpu_type="{MODEL}",slurmjobid="{job}",user="u"'
        lines.append(f"slurm_job_memory_usage_gpu{{{labels}}} 1048576 {int(ts.timestamp() * 1000)}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_telemetry_after_slurm_records_takes_their_gpus(tmp_path: Path) -> None:
    """job_gpus as `ingest slurm` stores them from scontrol IDX (job 1: GPUs 3 and 6 of node1;
    job 2: GPU 1), then the telemetry, where both jobs name their GPU 0: each sample lands on
    its job's own GPU of the host; job 3, which no record names, on a device of its own."""
    data = tmp_path / "data"
    wh = Warehouse(data)
    end = T0 + timedelta(hours=1)
    ties = pl.DataFrame(
        [("1", "node1", 3), ("1", "node1", 6), ("2", "node1", 1)],
        schema={"job_id": pl.String, "host": pl.String, "gpu": pl.Int16},
        orient="row",
    ).with_columns(
        pl.lit(0, pl.Int16).alias("attempt"),
        pl.lit(T0).alias("start_ts"),
        pl.lit(end).alias("end_ts"),
        pl.lit(gpu_from.SCONTROL).alias("gpu_from"),
    )
    wh.replace_file("job_gpus", "c", JOB_GPUS_KEY, ties)
    t1 = T0 + timedelta(seconds=30)
    samples = [
        ("1", 0, T0, 10.0),
        ("1", 1, T0, 11.0),
        ("2", 0, T0, 20.0),
        ("3", 0, T0, 30.0),
        ("1", 0, t1, 12.0),
        ("1", 1, t1, 13.0),
        ("2", 0, t1, 21.0),
        ("3", 0, t1, 31.0),
    ]
    path = _exposition(tmp_path / "sje.prom", samples)
    result = ingest_openmetrics(
        Settings(data_dir=data), ClusterConfig(name="c"), path, host="node1"
    )
    assert result.refused == []
    assert "2 job-host pair(s) placed on the host's GPUs Slurm named, 1 kept" in result.note
    with connect(data) as con:
        got = con.sql(
            "select job_id, gpu, ts, util from gpu_samples order by job_id, gpu, ts"
        ).fetchall()
    assert got == [
        ("1", 3, T0, 10.0),
        ("1", 3, t1, 12.0),
        ("1", 6, T0, 11.0),
        ("1", 6, t1, 13.0),
        ("2", 1, T0, 20.0),
        ("2", 1, t1, 21.0),
        ("3", JOB_LOCAL_BASE, T0, 30.0),
        ("3", JOB_LOCAL_BASE, t1, 31.0),
    ]
    # ingesting the same file again gives the same rows (job 3's slot read back from them)
    ingest_openmetrics(Settings(data_dir=data), ClusterConfig(name="c"), path, host="node1")
    with connect(data) as con:
        again = con.sql(
            "select job_id, gpu, ts, util from gpu_samples order by job_id, gpu, ts"
        ).fetchall()
    assert again == got
    # a later file: job 3 keeps its device (read back from the stored samples), job 0, new and
    # first in job order, takes the next slot
    t2 = T0 + timedelta(minutes=1)
    later = _exposition(tmp_path / "later.prom", [("0", 0, t2, 40.0), ("3", 0, t2, 32.0)])
    ingest_openmetrics(Settings(data_dir=data), ClusterConfig(name="c"), later, host="node1")
    with connect(data) as con:
        new = con.sql(
            "select job_id, gpu from gpu_samples where ts = $1 order by job_id", params=[t2]
        ).fetchall()
    assert new == [("0", JOB_LOCAL_BASE + SLOT_GPUS), ("3", JOB_LOCAL_BASE)]


def test_either_order_of_telemetry_and_slurm_gives_the_same_ties(tmp_path: Path) -> None:
    """A generated slurm-job-exporter cluster (no Slurm record names the GPUs): the telemetry
    before `ingest slurm`, or after it (its gpu = -1 rows filled by `fill_unknown_gpus`), gives
    the same job_gpus, each job on devices of its own (gpu >= JOB_LOCAL_BASE), none shared by
    two jobs at once, and the same per-job GPU time."""
    out = tmp_path / "gen"
    write_all(GeneratorSpec(seed=3, gpus=16, days=0.1, telemetry="slurm-job-exporter"), out)
    got: dict[str, tuple[pl.DataFrame, pl.DataFrame]] = {}
    for order in ("telemetry-first", "slurm-first"):
        cluster = ClusterConfig(
            name="c",
            telemetry="slurm-job-exporter",
            slurm=SlurmSource(file=out / "sacct.txt"),
            openmetrics=OpenMetricsSource(file=out / "metrics.om"),
        )
        settings = Settings(data_dir=tmp_path / order, clusters=[cluster])
        if order == "telemetry-first":
            ingest_openmetrics(settings, cluster, out / "metrics.om")
            ingest_slurm(settings, cluster)
        else:
            ingest_slurm(settings, cluster)
            ingest_openmetrics(settings, cluster, out / "metrics.om")
        analyze(settings, quiet=True)
        wh = Warehouse(settings.data_dir)
        ties = wh.read("job_gpus", "c").select("job_id", "host", "gpu", "start_ts", "end_ts")
        usage = wh.read("job_usage", "c").select("job_id", "gpu_s").sort("job_id")
        got[order] = (ties.sort("job_id", "host", "gpu"), usage)
    (ties, usage), (ties2, usage2) = got["telemetry-first"], got["slurm-first"]
    assert ties.equals(ties2) and usage.equals(usage2)
    assert ties.height > 0 and (ties["gpu"] >= JOB_LOCAL_BASE).all()
    # no device held by two jobs at once
    pairs = ties.join(ties, on=["host", "gpu"], suffix="_o").filter(
        (pl.col("job_id") != pl.col("job_id_o"))
        & (pl.col("start_ts") < pl.col("end_ts_o"))
        & (pl.col("start_ts_o") < pl.col("end_ts"))
    )
    assert pairs.height == 0
    assert usage["gpu_s"].sum() > 0


def test_a_sample_without_its_job_is_left_out_and_counted() -> None:
    placer = JobLocalPlacer()
    rows = pl.concat([_rows([("h", "1", 0, T0)]), _rows([("h", None, 0, T0)])])  # type: ignore[list-item]
    assert _gpus(placer.place(rows)) == [("h", "1", JOB_LOCAL_BASE)]
    assert placer.note().endswith("1 sample(s) with no job left out")
