"""Generic CSV / parquet exports with a TOML column mapping."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest
from harness.prometheus import Synthetic, write_synthetic_openmetrics
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from gpuwaste.cli import app
from gpuwaste.config import ClusterConfig, CsvSource, OpenMetricsSource, Settings, SlurmSource
from gpuwaste.ingest.base import IngestError, RunOptions
from gpuwaste.ingest.run import run_configured
from gpuwaste.ingest.slurm.source import ingest_slurm
from gpuwaste.ingest.sources import SOURCES
from gpuwaste.ingest.tabular.parse import (
    MappingError,
    SamplesMapping,
    load_mapping,
    map_samples,
    parse_allocation,
    split_csv,
)
from gpuwaste.ingest.tabular.source import ingest_tabular
from gpuwaste.warehouse.store import Warehouse

DATA = Path(__file__).parent / "data" / "tabular"


def utc(*a: int) -> datetime:
    return datetime(*a, tzinfo=UTC)  # type: ignore[misc]


def csv_cluster(**kw: Path) -> ClusterConfig:
    src = {
        "samples": DATA / "samples.csv",
        "jobs": DATA / "jobs.csv",
        "mapping": DATA / "mapping.toml",
    }
    src.update(kw)
    return ClusterConfig(name="t", csv=CsvSource(**src))


def test_csv_samples_and_jobs(data_dir: Path) -> None:
    s = Settings(data_dir=data_dir)
    r = ingest_tabular(s, csv_cluster(), "csv")
    wh = Warehouse(data_dir)
    g = wh.read("gpu_samples", "t").sort("host", "gpu", "ts")
    assert g.select("host", "gpu", "ts", "util", "mem_used_mib", "job_id").rows() == [
        ("n1", 0, utc(2026, 11, 1, 10), 50.0, 1024.0, "j1"),
        ("n1", 0, utc(2026, 11, 1, 10, 0, 30), 75.0, 2048.0, "j1"),
        ("n1", 1, utc(2026, 11, 1, 10, 1), 0.0, 0.0, None),  # +01:00 offset
        ("n2", 0, utc(2026, 11, 1, 10, 1, 30), 100.0, 1024.0, "j2"),  # naive: mapping zone UTC
    ]
    reasons = {
        (q.rsplit(":", 1)[1], why)
        for q, why in wh.read("quarantine", "t").select("location", "reason").rows()
    }
    assert reasons == {
        ("6", "utilization not a number in 0-100"),  # 1.5 x 100
        ("7", "unparseable time"),
        ("8", "missing host"),
        ("9", "bad GPU index"),
        ("4", "end before start"),
        ("5", "unparseable time"),
        ("6", "negative GPU count"),
        ("7", "unknown state: Exploded"),
    }
    jobs = {r["job_id"]: r for r in wh.read("jobs", "t").iter_rows(named=True)}
    assert set(jobs) == {"j1", "j2", "j7"}
    assert jobs["j1"]["state"] == "passed" and jobs["j1"]["start_ts"] == utc(2026, 11, 1, 10)
    assert jobs["j2"]["state"] == "running" and jobs["j2"]["is_debug"] is True
    assert jobs["j7"]["state"] == "killed" and jobs["j7"]["vc"] == "ml"
    jg = wh.read("job_gpus", "t").sort("job_id", "gpu")
    assert jg.select("job_id", "host", "gpu").rows() == [
        ("j1", "n1", 0),
        ("j2", "n2", 0),
        ("j2", "n2", 1),
    ]
    assert r.accepted == 4 + 3 and len(r.refused) == 8
    snap = {t: wh.read(t, "t") for t in ("gpu_samples", "jobs", "job_gpus")}
    ingest_tabular(s, csv_cluster(), "csv")
    for t, df in snap.items():
        assert wh.read(t, "t").equals(df), t
    assert wh.read("quarantine", "t").height == 8


def test_parquet_with_epoch_ms_and_native_timestamps(data_dir: Path, tmp_path: Path) -> None:
    samples = pl.DataFrame(
        {"t": [1793527200000, 1793527215000], "h": ["n1", "n1"], "g": [3, 3], "u": [12.0, 13.0]}
    )
    samples.write_parquet(tmp_path / "s.parquet")
    jobs = pl.DataFrame(
        {
            "id": ["a"],
            "start": [datetime(2026, 11, 1, 11, 0)],  # naive: read in the mapping's zone
            "end": [datetime(2026, 11, 1, 12, 0)],
            "hosts": ["n[1-2]"],
        }
    )
    jobs.write_parquet(tmp_path / "j.parquet")
    m = tmp_path / "m.toml"
    m.write_text(
        '[samples]\ntime = "t"\ntime_format = "epoch_ms"\nhost = "h"\ngpu = "g"\nutil = "u"\n'
        '[jobs]\njob_id = "id"\nstart = "start"\nend = "end"\nhosts = "hosts"\ntimezone = "Europe/Paris"\n'
    )
    c = ClusterConfig(
        name="p",
        parquet=CsvSource(samples=tmp_path / "s.parquet", jobs=tmp_path / "j.parquet", mapping=m),
    )
    ingest_tabular(Settings(data_dir=data_dir), c, "parquet")
    wh = Warehouse(data_dir)
    assert wh.read("gpu_samples", "p")["ts"].to_list() == [
        utc(2026, 11, 1, 10),
        utc(2026, 11, 1, 10, 0, 15),
    ]
    j = wh.read("jobs", "p")
    assert j["start_ts"].to_list() == [utc(2026, 11, 1, 10)] and j["state"].to_list() == ["passed"]
    assert wh.read("job_gpus", "p").select("host", "gpu").sort("host").rows() == [
        ("n1", -1),
        ("n2", -1),
    ]


def test_wrong_inputs_are_refused_before_writing(data_dir: Path, tmp_path: Path) -> None:
    s = Settings(data_dir=data_dir)
    with pytest.raises(IngestError, match="no column 'timestamp'"):
        ingest_tabular(s, csv_cluster(samples=DATA / "jobs.csv"), "csv")
    bad = tmp_path / "bad.toml"
    bad.write_text("[samples]\ntime = 'a'\n")
    with pytest.raises(IngestError, match=r"bad.toml: key 'samples.host'"):
        ingest_tabular(s, csv_cluster(mapping=bad), "csv")
    with pytest.raises(IngestError, match="not a readable parquet file"):
        c = ClusterConfig(
            name="t", parquet=CsvSource(samples=DATA / "samples.csv", mapping=DATA / "mapping.toml")
        )
        ingest_tabular(s, c, "parquet")
    assert not (data_dir / "parquet").exists()


def test_mapping_and_allocation_helpers() -> None:
    with pytest.raises(MappingError):
        load_mapping("x = 1\n")
    with pytest.raises(MappingError):
        load_mapping("[samples\n")
    assert parse_allocation("n1:0-1;n2:3 n3:5") == [("n1", 0), ("n1", 1), ("n2", 3), ("n3", 5)]
    with pytest.raises(ValueError):
        parse_allocation("n1")


def test_cli_one_off(data_dir: Path) -> None:
    res = CliRunner().invoke(
        app,
        [
            "ingest",
            "csv",
            "--samples",
            str(DATA / "samples.csv"),
            "--jobs",
            str(DATA / "jobs.csv"),
            "--mapping",
            str(DATA / "mapping.toml"),
            "--cluster",
            "x",
            "--data-dir",
            str(data_dir),
        ],
    )
    assert res.exit_code == 0, res.output
    assert "x/csv: 7 records accepted, 8 quarantined" in res.output


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.text(max_size=25), st.text(max_size=5), st.text(max_size=6)), max_size=12)
)
def test_samples_never_crash_and_every_row_is_accepted_or_refused(
    rows: list[tuple[str, str, str]],
) -> None:
    df = pl.DataFrame(
        rows, schema={"t": pl.String, "g": pl.String, "u": pl.String}, orient="row"
    ).with_columns(pl.lit("h").alias("h"))
    m = SamplesMapping(time="t", host="h", gpu="g", util="u", timezone="Europe/Berlin")
    good, refused = map_samples(df, m, "f", pl.int_range(pl.len()).cast(pl.String))
    assert good.height + len(refused) == df.height


def test_csv_rows_with_a_wrong_field_count_are_quarantined_alone() -> None:
    text = 'time,host\n2026-11-01T10:00:00Z,n1\n2026-11-01T10:00:15Z,n1,EXTRA\n"a\nb",n2\nshort\n'
    df, loc, refused = split_csv(text, "s.csv")
    assert df.with_columns(loc.alias("line")).rows() == [
        ("2026-11-01T10:00:00Z", "n1", "2"),
        ("a\nb", "n2", "4"),  # a quoted field spanning two lines keeps its first line number
    ]
    assert [(r.location, r.reason) for r in refused] == [
        ("s.csv:3", "wrong field count: 3 fields, the header has 2"),
        ("s.csv:6", "wrong field count: 1 fields, the header has 2"),
    ]


def test_csv_jobs_replace_label_jobs_and_csv_samples_resolve_slurm_gpus(
    data_dir: Path, tmp_path: Path
) -> None:
    """CSV jobs are scheduler records: jobs derived from an OpenMetrics file's `hpc_job` labels
    give way to them, in either order. CSV samples carrying job ids give Slurm's index-unknown
    allocations (gpu = -1) their GPUs, as telemetry ingested first would have."""
    om = tmp_path / "metrics.om"
    write_synthetic_openmetrics(Synthetic(points=40, node=False), om)
    s = Settings(data_dir=data_dir)
    telemetry = ClusterConfig(name="t", openmetrics=OpenMetricsSource(file=om))
    jobs_only = csv_cluster(samples=None)  # type: ignore[arg-type]
    wh = Warehouse(data_dir)
    for first, then in ((telemetry, jobs_only), (jobs_only, telemetry)):
        for c in (first, then):
            run_configured(
                Settings(data_dir=data_dir, clusters=[c]), SOURCES, RunOptions(quiet=True)
            )
        assert set(wh.read("jobs", "t")["source"]) == {"csv"}
        assert not (wh.cluster_dir("job_gpus", "t") / "openmetrics.parquet").exists()
    sacct = tmp_path / "sacct.txt"
    sacct.write_text("JobID|State|Start|End|AllocTRES|NodeList\n"
                     "7|COMPLETED|2026-11-01T09:59:00|2026-11-01T10:02:00|gres/gpu=1|n1\n")  # fmt: skip
    ingest_slurm(s, ClusterConfig(name="s", slurm=SlurmSource(file=sacct)))
    assert wh.read("job_gpus", "s")["gpu"].to_list() == [-1]
    samples = tmp_path / "samples.csv"
    samples.write_text((DATA / "samples.csv").read_text().replace(",j1\n", ",7\n"))
    ingest_tabular(s, ClusterConfig(name="s", csv=CsvSource(
        samples=samples, mapping=DATA / "mapping.toml")), "csv")  # fmt: skip
    assert wh.read("job_gpus", "s").select("host", "gpu").rows() == [("n1", 0)]
