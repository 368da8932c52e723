"""The generator's planted Slurm jobs come back exactly through `ingest slurm`, and join to samples.

Generated clusters: `sacct.txt` (times local to the spec's zone, without a zone), gpu_samples
(job_id = the DCGM hpc_job value) and the truth frames (`jobs_frame`, `job_gpus_frame`).
"""

from __future__ import annotations

from datetime import UTC, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import polars as pl
import pytest

from gpuwaste.config import ClusterConfig, Settings, SlurmSource
from gpuwaste.generate import GeneratorSpec, job_gpus_frame, jobs_frame, simulate, write_all
from gpuwaste.generate.parquet import write_samples_parquet
from gpuwaste.ingest.gpu_indices import UNKNOWN_GPU
from gpuwaste.ingest.slurm.source import ingest_slurm
from gpuwaste.warehouse.catalog import connect
from gpuwaste.warehouse.store import Warehouse

UTC_SPEC = GeneratorSpec(seed=3, gpus=32, days=1.0, cluster="gen", timezone="UTC")
NY_SPEC = GeneratorSpec(seed=3, gpus=32, days=1.0, cluster="gen", timezone="America/New_York")
JOB_COLS = ["job_id", "user", "vc", "name", "state", "raw_state", "submit_ts", "start_ts",
            "end_ts", "gpus", "is_debug"]  # fmt: skip
GPU_COLS = ["job_id", "attempt", "host", "gpu", "start_ts", "end_ts"]


def ingest(spec: GeneratorSpec, out: Path, data_dir: Path, with_samples: bool = True) -> Warehouse:
    write_all(spec, out)
    wh = Warehouse(data_dir)
    if with_samples:
        write_samples_parquet(spec, out / "samples")
        df = pl.read_parquet(sorted((out / "samples").glob("date=*/*.parquet")))
        end = spec.start + timedelta(seconds=spec.duration_s)
        wh.replace_window("gpu_samples", spec.cluster, spec.start, end, df, source="generator")
    c = ClusterConfig(
        name=spec.cluster, timezone=spec.timezone, slurm=SlurmSource(file=out / "sacct.txt")
    )
    result = ingest_slurm(Settings(data_dir=data_dir), c)
    assert result.refused == []
    return wh


@pytest.fixture(scope="module")
def utc_warehouse(tmp_path_factory: pytest.TempPathFactory) -> Warehouse:
    base = tmp_path_factory.mktemp("gen")
    return ingest(UTC_SPEC, base / "out", base / "wh")


def test_planted_jobs_come_back_exactly(utc_warehouse: Warehouse) -> None:
    truth = simulate(UTC_SPEC)
    want = jobs_frame(truth).select(JOB_COLS).sort("job_id")
    got = utc_warehouse.read("jobs", UTC_SPEC.cluster).select(JOB_COLS).sort("job_id")
    assert got.height == want.height > 50
    # sacct prints no AllocTRES for a job cancelled before it started (the truth keeps its request).
    never = {j.job_id for j in truth.jobs if not j.ran}
    assert never
    assert got.filter(pl.col("job_id").is_in(list(never)))["gpus"].to_list() == [0] * len(never)
    assert got.drop("gpus").equals(want.drop("gpus"))
    ran = ~pl.col("job_id").is_in(list(never))
    assert got.filter(ran)["gpus"].equals(want.filter(ran)["gpus"])


def test_planted_gpu_sets_and_intervals_come_back_exactly(utc_warehouse: Warehouse) -> None:
    truth = simulate(UTC_SPEC)
    want = job_gpus_frame(truth).select(GPU_COLS).sort(GPU_COLS)
    got = utc_warehouse.read("job_gpus", UTC_SPEC.cluster).select(GPU_COLS)
    # A job with no sample at all carrying its hpc_job label (shorter than one interval) is known
    # per host only: gpu = -1. Every other job has exactly its planted GPUs and interval.
    unknown = set(got.filter(pl.col("gpu") == UNKNOWN_GPU)["job_id"])
    unsampled = {j.job_id for j in truth.jobs if j.alloc and (j.plan is None or j.plan.n == 0)}
    assert unknown == unsampled
    for jid in unknown:
        hosts = {
            truth.hosts[h].name for h, _ in next(j for j in truth.jobs if j.job_id == jid).alloc
        }
        assert set(got.filter(pl.col("job_id") == jid)["host"]) == hosts
    keep = ~pl.col("job_id").is_in(list(unknown))
    assert got.filter(keep).sort(GPU_COLS).equals(want.filter(keep))


def test_every_sample_inside_an_allocation_joins_to_that_job_and_none_outside(
    utc_warehouse: Warehouse,
) -> None:
    con = connect(utc_warehouse.data_dir)
    rows = con.sql(
        """
        select s.job_id as labelled, list(distinct g.job_id) filter (g.job_id is not null) as joined
        from gpu_samples s
        left join job_gpus g
          on g.cluster = s.cluster and g.host = s.host and g.gpu = s.gpu
         and s.ts >= g.start_ts and (g.end_ts is null or s.ts < g.end_ts)
        group by s.cluster, s.host, s.gpu, s.ts, s.job_id
        """
    ).pl()
    assert rows.height > 100_000
    inside = rows.filter(pl.col("labelled").is_not_null())
    outside = rows.filter(pl.col("labelled").is_null())
    assert inside.height > 0 and outside.height > 0
    assert inside.filter(pl.col("joined") != pl.concat_list("labelled")).height == 0
    assert outside.filter(pl.col("joined").list.len() > 0).height == 0


def test_local_times_across_the_fall_back(tmp_path: Path) -> None:
    """Outside the repeated hour every time is exact; inside it a time without a zone has two
    readings, and the parser takes one of them (the one Elapsed and submission order imply)."""
    wh = ingest(NY_SPEC, tmp_path / "out", tmp_path / "wh", with_samples=False)
    want = jobs_frame(simulate(NY_SPEC)).select(JOB_COLS).sort("job_id")
    got = wh.read("jobs", NY_SPEC.cluster).select(JOB_COLS).sort("job_id")
    ny = ZoneInfo("America/New_York")
    repeated = 0
    for col in ("submit_ts", "start_ts", "end_ts"):
        for g, w in zip(got[col], want[col], strict=True):
            if w is None:
                assert g is None
                continue
            local = w.astimezone(ny)
            other = local.replace(fold=1 - local.fold).astimezone(UTC)
            if other != w:  # in the repeated hour
                repeated += 1
                assert g in (w, other)
            else:
                assert g == w
    assert repeated > 10
    ran = got["start_ts"].is_not_null() & got["end_ts"].is_not_null()
    assert (got.filter(ran)["end_ts"] >= got.filter(ran)["start_ts"]).all()
