"""Large files and gzip bombs: the OpenMetrics source reads a file in blocks, in bounded memory.

A gzip bomb (2 MB that decompress to 2 GiB of newlines) is refused in one sentence naming the
file and the bound, in a real `gpuwaste ingest` process held to 1.5 GiB of address space, with
nothing written. A file read in blocks of a few KiB (every block boundary and every day boundary
crossed) gives the rows and refused records of reading it in one piece (`parse_text` and the row
builders over the whole text, as before streaming); an error in the middle of the file leaves the
warehouse byte for byte as it was; loading a file again does not duplicate a row.
"""

from __future__ import annotations

import gzip
import os
import resource
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest

from gpuwaste.config import ClusterConfig, FileLimits, PrometheusLabels, Settings
from gpuwaste.generate import GeneratorSpec, write_all
from gpuwaste.ingest.base import IngestError, IngestResult
from gpuwaste.ingest.prometheus import openmetrics_source, rows
from gpuwaste.ingest.prometheus.openmetrics_parse import parse_text
from gpuwaste.ingest.prometheus.openmetrics_source import OPENMETRICS, ingest_openmetrics
from gpuwaste.warehouse.store import Warehouse

GPUWASTE = Path(sys.executable).parent / "gpuwaste"
# Two days and a half at 5-minute scrapes: three day files, some MB of text.
SPEC = GeneratorSpec(
    seed=11, gpus=16, days=2.5, interval_s=300, start=datetime(2026, 3, 1, 6, tzinfo=UTC)
)
CLUSTER = ClusterConfig(name="big")
# Blocks small enough that the file is a few hundred of them (every day boundary crossed inside
# the file, and many a series' samples cut between two blocks); smaller ones add only time
# (each block is staged on its own).
BLOCK = 64 << 10

# Oddities that the day-by-day build must refuse exactly as one piece does: a series without a
# host (refused once, with its samples over the whole file), values out of range, a line that is
# no sample, and a counter series whose samples span a day boundary.
ODD = """\
DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-nohost"}} 5 {t0}
DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-nohost"}} 6 {t1}
DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-nohost"}} 7 {t2}
DCGM_FI_DEV_GPU_UTIL{{gpu="1",UUID="GPU-odd",Hostname="odd-node"}} 250 {t1}
DCGM_FI_DEV_GPU_UTIL{{gpu="1",UUID="GPU-odd",Hostname="odd-node"}} NaN {t2}
this is not a sample
broken{{gpu="0" 1
node_memory_MemTotal_bytes{{instance="odd-node:9100"}} -1 {t1}
node_cpu_seconds_total{{instance="odd-node:9100",cpu="0",mode="idle"}} 100 {t0}
node_cpu_seconds_total{{instance="odd-node:9100",cpu="0",mode="idle"}} 150 {t1}
node_cpu_seconds_total{{instance="odd-node:9100",cpu="0",mode="user"}} 10 {t0}
node_cpu_seconds_total{{instance="odd-node:9100",cpu="0",mode="user"}} 60 {t1}
"""


@pytest.fixture(scope="module")
def big_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("big")
    write_all(SPEC, out)
    path = out / "metrics.om"
    text = path.read_text()
    assert text.rstrip().endswith("# EOF")
    # t0 on day 1, t1 just after the first midnight, t2 on day 2
    t0, t1, t2 = (
        int(datetime(2026, 3, d, h, tzinfo=UTC).timestamp()) for d, h in ((1, 23), (2, 0), (2, 12))
    )
    body = text.rstrip().removesuffix("# EOF")
    path.write_text(body + ODD.format(t0=t0, t1=t1, t2=t2) + "# EOF\n")
    return path


@pytest.fixture(scope="module")
def loaded(
    big_file: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Settings, IngestResult]:
    """`big_file` ingested once in blocks of `BLOCK`, the slow part of the tests below: those
    that write to the warehouse write to a copy (`_copy`)."""
    settings = Settings(data_dir=tmp_path_factory.mktemp("loaded") / "d")
    return settings, ingest_openmetrics(settings, CLUSTER, big_file, chunk_bytes=BLOCK)


def _copy(loaded: tuple[Settings, IngestResult], tmp_path: Path) -> Settings:
    settings = Settings(data_dir=tmp_path / "d")
    shutil.copytree(loaded[0].data_dir, settings.data_dir)
    return settings


def _snapshot(data_dir: Path) -> dict[str, bytes]:
    root = data_dir / "parquet"
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def _table(wh: Warehouse, name: str) -> pl.DataFrame:
    df = wh.read(name, CLUSTER.name).drop("cluster", "ingested_at", strict=False)
    return df.sort(df.columns, nulls_last=True)


def test_blocks_give_the_rows_of_one_piece(
    big_file: Path, loaded: tuple[Settings, IngestResult], tmp_path: Path
) -> None:
    """Blocks of `BLOCK` (hundreds of them; three days) == the whole text parsed at once."""
    settings, result = loaded
    wh = Warehouse(settings.data_dir)
    assert len(wh.day_files("gpu_samples", CLUSTER.name)) == 3

    # one piece, as the source did before it read in blocks
    mtime = datetime.fromtimestamp(big_file.stat().st_mtime, UTC)
    parsed = parse_text(big_file.read_text(), location=str(big_file), default_ts=mtime)
    gpu = rows.gpu_rows(parsed.series, PrometheusLabels(), source=OPENMETRICS)
    host = rows.host_rows(parsed.series, PrometheusLabels(), source=OPENMETRICS)
    for name, frame in (("gpu_samples", gpu.frame), ("host_samples", host.frame)):
        want = frame.select(_table(wh, name).columns)
        assert _table(wh, name).equals(want.sort(want.columns, nulls_last=True)), name
    refused = parsed.refused + gpu.refused + host.refused
    want_q = sorted((r.location, r.reason, r.raw) for r in refused)
    got_q = sorted(_table(wh, "quarantine").select("location", "reason", "raw").iter_rows())
    assert got_q == want_q
    reasons = {r for _, r, _ in got_q}
    assert "no host label: 3 sample(s) of DCGM_FI_DEV_GPU_UTIL" in reasons  # once, all 3 days
    assert {"malformed line", "malformed sample", "NaN: DCGM_FI_DEV_GPU_UTIL"} <= reasons
    # the CPU delta across midnight (t0 on day 1, t1 on day 2) is kept: 100 x 50 / 100 busy
    odd = _table(wh, "host_samples").filter(pl.col("host") == "odd-node")
    assert odd["cpu_util"].to_list() == [50.0]
    assert result.accepted == gpu.frame.height + host.frame.height
    # and the default block size gives the same warehouse
    other = Settings(data_dir=tmp_path / "e")
    ingest_openmetrics(other, CLUSTER, big_file)
    for name in ("gpu_samples", "host_samples", "jobs", "job_gpus", "quarantine"):
        assert _table(Warehouse(other.data_dir), name).equals(_table(wh, name)), name


def test_loading_again_duplicates_nothing(
    big_file: Path, loaded: tuple[Settings, IngestResult], tmp_path: Path
) -> None:
    settings = _copy(loaded, tmp_path)  # loaded once in blocks of BLOCK
    wh = Warehouse(settings.data_dir)
    first = {n: _table(wh, n) for n in ("gpu_samples", "host_samples", "quarantine", "jobs")}
    ingest_openmetrics(settings, CLUSTER, big_file, chunk_bytes=1 << 20)  # other block boundaries
    for name, frame in first.items():
        assert _table(wh, name).equals(frame), name


def test_an_error_mid_file_writes_nothing(
    big_file: Path,
    loaded: tuple[Settings, IngestResult],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The file loaded once; then its second load fails half-way through: a line too long in
    the middle of the file (found while parsing), and a failure building the second day's rows.
    Both leave every warehouse file as it was, and no staging folder."""
    settings = _copy(loaded, tmp_path)
    before = _snapshot(settings.data_dir)

    lines = big_file.read_text().split("\n")
    half = len(lines) // 2
    damaged = tmp_path / "damaged.om"
    damaged.write_text("\n".join([*lines[:half], "x" * (2 << 20), *lines[half:]]))
    with pytest.raises(IngestError) as err:
        ingest_openmetrics(settings, CLUSTER, damaged, chunk_bytes=BLOCK)
    assert str(err.value) == (
        f"{damaged} has a line longer than 1,048,576 bytes (line {half + 1:,}): not OpenMetrics "
        "text; nothing was written."
    )
    assert _snapshot(settings.data_dir) == before

    calls = []
    real = rows.host_rows

    def failing(*args: object, **kwargs: object) -> rows.Rows:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("the second day fails")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(openmetrics_source, "host_rows", failing)
    with pytest.raises(RuntimeError, match="second day"):
        ingest_openmetrics(settings, CLUSTER, big_file, chunk_bytes=BLOCK)
    assert _snapshot(settings.data_dir) == before
    assert not list((settings.data_dir / ".staging").glob("*"))


def _bomb(path: Path, gib: int = 2) -> None:
    """`gib` GiB of newlines in about 2 MB: a gzip member of 1 MiB of newlines, repeated (the
    gzip format allows members one after another; `gzip -d` and Python read them as one)."""
    member = gzip.compress(b"\n" * (1 << 20), compresslevel=9)
    with open(path, "wb") as fh:
        for _ in range(gib << 10):
            fh.write(member)


# The 2 GiB of text cannot fit; the process itself (Python, polars, DuckDB and their threads'
# arenas) reserves up to about 1 GiB of address space, not all of it used.
ADDRESS_SPACE = 3 << 29  # 1.5 GiB


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def test_gzip_bomb_refused_in_one_sentence_in_bounded_memory(tmp_path: Path) -> None:
    bomb = tmp_path / "metrics.om.gz"
    _bomb(bomb)
    assert bomb.stat().st_size < 3_000_000
    data_dir = tmp_path / "d"
    left = data_dir / ".staging" / "openmetrics-killed" / "samples"  # a killed run's staging
    left.mkdir(parents=True)
    (left / "part-000000.parquet").write_bytes(b"x")
    proc = subprocess.Popen(
        [
            str(GPUWASTE),
            "ingest",
            "--data-dir",
            str(data_dir),
            "--quiet",
            "openmetrics",
            "--file",
            str(bomb),
            "--cluster",
            "c",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_limited,
        env={**os.environ, "MALLOC_ARENA_MAX": "2"},  # fewer reserved arenas: a steadier limit
    )
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err
    size = bomb.stat().st_size
    assert err.strip() == (
        f"gpuwaste: {bomb} decompresses to more than {200 * size:,} bytes of text (200 times "
        f"its {size:,} bytes, [files] max_gzip_ratio = 200): refused as a likely gzip bomb; "
        "nothing was written."
    )
    assert not list(data_dir.rglob("*.parquet"))
    assert not list(data_dir.glob(".staging/*"))  # the killed run's staging removed too


def test_size_bound_refuses_a_plain_file_too(big_file: Path, tmp_path: Path) -> None:
    limits = FileLimits(max_size_gib=100_000 / (1 << 30))
    settings = Settings(data_dir=tmp_path / "d", files=limits)
    with pytest.raises(IngestError) as err:
        ingest_openmetrics(settings, CLUSTER, big_file)
    assert str(err.value) == (
        f"{big_file} holds more than 100,000 bytes of text ([files] max_size_gib = "
        f"{limits.max_size_gib:g}): refused as too large; nothing was written."
    )
    assert not (settings.data_dir / "parquet").exists()


DATA = Path(__file__).resolve().parent.parent / "data"


def test_files_read_whole_are_refused_past_their_bound(tmp_path: Path) -> None:
    """sacct, a generic jobs CSV and the Philly job log are still read whole: past `[files]
    max_read_whole_mib` each is refused in one sentence before anything is written."""
    from gpuwaste.config import CsvSource, PhillySource, SlurmSource
    from gpuwaste.ingest.philly.source import ingest_philly
    from gpuwaste.ingest.slurm.source import ingest_slurm
    from gpuwaste.ingest.tabular.source import ingest_tabular

    limits = FileLimits(max_read_whole_mib=200 / (1 << 20))
    settings = Settings(data_dir=tmp_path / "d", files=limits)
    sacct = DATA / "sacct" / "berlin_quirks_parsable2.txt"
    jobs = DATA / "tabular" / "jobs.csv"
    job_log = DATA / "philly" / "cluster_job_log"
    cases = [
        (
            sacct,
            "sacct",
            lambda: ingest_slurm(settings, ClusterConfig(name="s", slurm=SlurmSource(file=sacct))),
        ),
        (
            jobs,
            "csv",
            lambda: ingest_tabular(
                settings,
                ClusterConfig(
                    name="t",
                    csv=CsvSource(jobs=jobs, mapping=DATA / "tabular" / "mapping.toml"),
                ),
                "csv",
            ),
        ),
        (
            job_log,
            "Philly job log",
            lambda: ingest_philly(
                settings, ClusterConfig(name="p", philly=PhillySource(dir=DATA / "philly"))
            ),
        ),
    ]
    for path, what, run in cases:
        with pytest.raises(IngestError) as err:
            run()
        assert str(err.value) == (
            f"{path} is {path.stat().st_size:,} bytes, more than the 200 that a {what} file read "
            f"whole may be ([files] max_read_whole_mib = {limits.max_read_whole_mib:g}): split it "
            "or raise the bound; nothing was written."
        )
    assert not list((tmp_path / "d").rglob("*.parquet"))


def test_garbage_is_quarantined_from_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Lines of garbage around one sample: every refused record reaches the quarantine through
    the staged files (held in memory up to a bound, here 1 KiB), the summary counts them all,
    and the result keeps only the first ones (200 MB of garbage are 2.8 M records: 2.4 GB when
    they were held as Python objects, 0.78 GB now; docs/reliability.md)."""
    monkeypatch.setattr(openmetrics_source._Refusals, "HOLD_BYTES", 1024)
    monkeypatch.setattr(openmetrics_source._Refusals, "FIRST", 10)
    path = tmp_path / "garbage.prom"
    garbage = [f"garbage-{i}-{'x' * (i % 50)}" for i in range(3000)]
    sample = 'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-x",Hostname="n1"} 10 1793448000000'
    path.write_text("\n".join([*garbage[:1500], sample, *garbage[1500:]]) + "\n")
    settings = Settings(data_dir=tmp_path / "d")
    result = ingest_openmetrics(settings, CLUSTER, path, chunk_bytes=8192)
    assert result.summary() == (
        "big/openmetrics: 1 records accepted, 3000 quarantined (3000 malformed line); garbage.prom"
    )
    assert len(result.refused) == 10
    q = _table(Warehouse(settings.data_dir), "quarantine")
    assert q.height == 3000
    assert sorted(q["raw"].to_list()) == sorted(garbage)
    lines = {int(loc.rsplit(":", 1)[1]) for loc in q["location"]}
    assert lines == {*range(1, 1501), *range(1502, 3002)}
    # loading it again replaces the file's batch
    ingest_openmetrics(settings, CLUSTER, path)
    assert _table(Warehouse(settings.data_dir), "quarantine").height == 3000


def test_a_family_first_seen_on_a_later_day(tmp_path: Path) -> None:
    """Day 1 holds only GPU samples, day 2 the host series too, one of them without a host:
    that series is refused once, as in one piece (the host builder refuses a family's series
    only where the family has samples)."""
    d1 = int(datetime(2026, 3, 1, 12, tzinfo=UTC).timestamp())
    d2 = int(datetime(2026, 3, 2, 12, tzinfo=UTC).timestamp())
    text = "\n".join(
        [
            f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-a",Hostname="n1"}} 10 {d1}',
            f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-a",Hostname="n1"}} 20 {d2}',
            f'node_cpu_seconds_total{{cpu="0",mode="idle"}} 5 {d2}',
            f'node_cpu_seconds_total{{cpu="0",mode="idle"}} 6 {d2 + 15}',
            f'node_cpu_seconds_total{{instance="n1:9100",cpu="0",mode="idle"}} 5 {d2}',
            f'node_cpu_seconds_total{{instance="n1:9100",cpu="0",mode="idle"}} 6 {d2 + 15}',
            "# EOF",
        ]
    )
    path = tmp_path / "late.om"
    path.write_text(text + "\n")
    settings = Settings(data_dir=tmp_path / "d")
    ingest_openmetrics(settings, CLUSTER, path, chunk_bytes=64)
    parsed = parse_text(text + "\n", location=str(path))
    want = rows.host_rows(parsed.series, PrometheusLabels(), source=OPENMETRICS).refused
    got = _table(Warehouse(settings.data_dir), "quarantine")
    assert sorted(got.select("location", "reason", "raw").iter_rows()) == sorted(
        (r.location, r.reason, r.raw) for r in want
    )
    assert got["reason"].to_list() == ["no host label: series of node_cpu_seconds_total"]


def test_csv_and_parquet_samples_in_batches_give_the_rows_of_one(tmp_path: Path) -> None:
    """Generic samples read a row at a time (every batch boundary crossed; a repeated
    (host, gpu, ts, job) whose last copy wins; refused rows; two days) == read in one batch."""
    from gpuwaste.config import CsvSource
    from gpuwaste.ingest.tabular.source import ingest_tabular

    src = (DATA / "tabular" / "samples.csv").read_text()
    extra = "2026-11-02T10:00:00Z,n1,0,0.25,1,85899345920,j1\n2026-11-01T10:00:00Z,n1,0,0.3,1,85899345920,j1\n"
    csv_path = tmp_path / "samples.csv"
    csv_path.write_text(src + extra)
    parquet_path = tmp_path / "samples.parquet"
    pl.read_csv(csv_path, infer_schema=False).write_parquet(parquet_path)
    mapping = DATA / "tabular" / "mapping.toml"
    for kind, path in (("csv", csv_path), ("parquet", parquet_path)):
        tables = []
        for batch_rows in (1, 1_000_000):
            settings = Settings(data_dir=tmp_path / f"{kind}-{batch_rows}")
            cfg = CsvSource(samples=path, mapping=mapping)
            cluster = ClusterConfig(name="big", **{kind: cfg})
            ingest_tabular(settings, cluster, kind, batch_rows=batch_rows)  # type: ignore[arg-type]
            wh = Warehouse(settings.data_dir)
            tables.append((_table(wh, "gpu_samples"), _table(wh, "quarantine")))
        (one_row, one_row_q), (whole, whole_q) = tables
        assert one_row.equals(whole) and one_row_q.equals(whole_q), kind
        assert len(Warehouse(tmp_path / f"{kind}-1").day_files("gpu_samples", "big")) == 2
        kept = whole.filter((pl.col("host") == "n1") & (pl.col("gpu") == 0))["util"].to_list()
        assert 30.0 in kept and 50.0 not in kept  # the later copy of 10:00 won
