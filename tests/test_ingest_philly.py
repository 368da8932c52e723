"""The Philly trace source on recorded files with the trace's quirks (tests/data/philly)."""

from __future__ import annotations

import itertools
import json
import shutil
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest
from harness.prometheus import Synthetic, write_synthetic_openmetrics
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from gpuwaste.cli import app
from gpuwaste.config import ClusterConfig, FileLimits, OpenMetricsSource, PhillySource, Settings
from gpuwaste.ingest.base import IngestError
from gpuwaste.ingest.philly.parse import (
    PhillyFormatError,
    check_header,
    lines_frame,
    parse_chunk,
    parse_cpu_util_lines,
    parse_gpu_util_lines,
    parse_job_log,
    parse_mem_util_lines,
)
from gpuwaste.ingest.philly.source import ingest_philly, iter_byte_chunks
from gpuwaste.ingest.prometheus.openmetrics_source import ingest_openmetrics
from gpuwaste.warehouse.store import Warehouse

PHILLY = Path(__file__).parent / "data" / "philly"
Parser = Callable[[pl.DataFrame, str], tuple[pl.DataFrame, pl.DataFrame]]
J = "application_1506638472019_"


def utc(*a: int) -> datetime:
    return datetime(*a, tzinfo=UTC)  # type: ignore[misc]


def cluster(folder: Path = PHILLY) -> ClusterConfig:
    return ClusterConfig(name="philly", philly=PhillySource(dir=folder))


def test_job_log_states_attempts_none_and_fall_back() -> None:
    p = parse_job_log((PHILLY / "cluster_job_log").read_text())
    jobs = {r["job_id"]: r for r in p.jobs.iter_rows(named=True)}
    assert set(jobs) == {J + s for s in ("10238", "10239", "10240", "10241", "22001", "22004")}
    first = jobs[J + "10238"]
    assert (first["state"], first["raw_state"], first["vc"], first["user"]) == (
        "passed",
        "Pass",
        "6214e9",
        "b436b2",
    )
    assert first["gpus"] == 8  # m412 is listed with 2 GPUs in the (wrong) machine list
    assert first["submit_ts"] == utc(2017, 10, 3, 7, 2, 51)
    assert jobs[J + "10239"]["state"] == "killed"
    failed = jobs[J + "10240"]
    assert failed["state"] == "unsuccessful" and failed["gpus"] == 1  # first attempt's GPUs
    assert (failed["start_ts"], failed["end_ts"]) == (
        utc(2017, 10, 3, 7, 6),
        utc(2017, 10, 3, 7, 30),
    )
    assert jobs[J + "10241"]["gpus"] == 0 and jobs[J + "10241"]["start_ts"] is None  # no attempts
    # Fall-back hour: starts 01:50 PDT, ends 01:10 PST.
    fb = jobs[J + "22001"]
    assert (fb["start_ts"], fb["end_ts"]) == (utc(2017, 11, 5, 8, 50), utc(2017, 11, 5, 9, 10))
    g = p.job_gpus
    assert g.filter(pl.col("job_id") == J + "10241").height == 0
    assert sorted(g.filter(pl.col("job_id") == J + "10239")["gpu"].to_list()) == [2, 3, 4, 6]
    att = g.filter(pl.col("job_id") == J + "10240").sort("attempt", "host", "gpu")
    assert att.select("attempt", "host", "gpu").rows() == [
        (0, "m29", 0),
        (2, "m31", 0),
        (2, "m31", 1),
        (2, "m51", 5),
    ]
    assert (
        p.attempts_without_interval == 2
    )  # "None" end in attempt 1 of 10240, "None" start of 22004
    assert {r.reason.split(":")[0] for r in p.refused} == {
        "attempt ends before it starts",
        "unknown status",
    }
    assert {r.location for r in p.refused} == {"cluster_job_log:job 5", "cluster_job_log:job 6"}


def test_gpu_util_rows_quirks() -> None:
    samples, refused = parse_gpu_util_lines(
        lines_frame((PHILLY / "cluster_gpu_util").read_text()).slice(1)
    )
    by = {(h, g, t): u for h, g, t, u, _ in samples.rows()}
    assert by[("m29", 1, utc(2017, 10, 3, 7, 8))] == pytest.approx(99.366666667)
    assert ("m29", 1, utc(2017, 10, 3, 7, 9)) not in by  # NA
    assert {g for h, g, _ in by if h == "m412"} == {0, 1, 2}
    m51 = sorted((g, u) for (h, g, _), u in by.items() if h == "m51")  # the 18-field row
    assert m51 == [(k, float(k + 1)) for k in range(8)]
    # The repeated hour: 01:30 PDT and 01:30 PST are an hour apart in UTC.
    assert by[("m29", 0, utc(2017, 11, 5, 8, 30))] == 10.0
    assert by[("m29", 0, utc(2017, 11, 5, 9, 30))] == 20.0
    reasons = dict(zip(refused["location"], refused["reason"], strict=True))
    assert reasons == {
        "cluster_gpu_util:7": "wrong field count: 5",
        "cluster_gpu_util:8": "unknown time zone suffix",
        "cluster_gpu_util:9": "utilization not a number in 0-100",
    }


def test_cpu_and_mem_rows() -> None:
    cpu, bad = parse_cpu_util_lines(lines_frame((PHILLY / "cluster_cpu_util").read_text()).slice(1))
    assert cpu.height == 5 and bad["reason"].to_list() == ["cpu utilization not a number in 0-100"]
    mem, bad = parse_mem_util_lines(lines_frame((PHILLY / "cluster_mem_util").read_text()).slice(1))
    assert mem.height == 3  # NA and mem_total == 0 are skipped, not refused
    assert bad["location"].to_list() == ["cluster_mem_util:7"]
    frac = dict(zip(mem["ts"], mem["mem_used_frac"], strict=True))
    assert frac[utc(2017, 10, 3, 7, 8)] == pytest.approx(0.5)


def test_ingest_twice_writes_the_same_rows_once(data_dir: Path) -> None:
    s = Settings(data_dir=data_dir)
    r = ingest_philly(s, cluster())
    assert len(r.refused) == 7
    wh = Warehouse(data_dir)
    snap = {t: wh.read(t, "philly") for t in ("jobs", "job_gpus", "gpu_samples", "host_samples")}
    assert snap["gpu_samples"].height == 36 and snap["host_samples"].height == 6
    assert snap["gpu_samples"]["mem_used_mib"].null_count() == 36
    assert snap["job_gpus"].height == 17
    ingest_philly(s, cluster())
    for t, df in snap.items():
        assert wh.read(t, "philly").equals(df), t
    assert wh.read("quarantine", "philly").height == 7


def test_small_chunks_give_the_same_result(data_dir: Path, tmp_path: Path) -> None:
    path = PHILLY / "cluster_gpu_util"
    whole = b"".join(d for _, d in iter_byte_chunks(path))
    pieces = list(iter_byte_chunks(path, chunk_bytes=50))
    assert b"".join(d for _, d in pieces) == whole == path.read_bytes().split(b"\n", 1)[1]
    assert pieces[0][0] == 2 and all(
        b[0] == a[0] + a[1].count(b"\n") for a, b in itertools.pairwise(pieces)
    )
    a, b = tmp_path / "a", tmp_path / "b"
    ingest_philly(Settings(data_dir=a), cluster(), chunk_bytes=64)
    ingest_philly(Settings(data_dir=b), cluster())
    assert Warehouse(a).read("gpu_samples").equals(Warehouse(b).read("gpu_samples"))
    qa = Warehouse(a).read("quarantine").sort("location")["location"]
    assert qa.equals(Warehouse(b).read("quarantine").sort("location")["location"])


@pytest.mark.parametrize(
    ("kind", "parse"),
    [
        ("cluster_gpu_util", parse_gpu_util_lines),
        ("cluster_cpu_util", parse_cpu_util_lines),
        ("cluster_mem_util", parse_mem_util_lines),
    ],
)
def test_fast_path_equals_line_by_line_parser(kind: str, parse: Parser) -> None:
    data = (PHILLY / kind).read_bytes().split(b"\n", 1)[1]
    fast, fast_bad, n = parse_chunk(kind, data, 2, kind)
    slow, slow_bad = parse(lines_frame(data.decode(), 2), kind)
    key = list(fast.columns[:-1])
    assert fast.sort(key).equals(slow.sort(key))
    assert fast_bad.sort("location").equals(slow_bad.sort("location"))
    assert n == data.count(b"\n")


def test_wrong_files_are_refused_before_anything_is_written(data_dir: Path, tmp_path: Path) -> None:
    bad = tmp_path / "trace"
    shutil.copytree(PHILLY, bad)
    shutil.copy(
        Path(__file__).parent / "data" / "sacct" / "p_trailing_delim.txt", bad / "cluster_cpu_util"
    )
    with pytest.raises(IngestError, match="cluster_cpu_util: not the Philly cluster_cpu_util file"):
        ingest_philly(Settings(data_dir=data_dir), cluster(bad))
    shutil.copy(PHILLY / "cluster_cpu_util", bad / "cluster_cpu_util")
    (bad / "cluster_job_log").write_text("time,machine_id,cpu_util\n")
    with pytest.raises(IngestError, match="cluster_job_log is not the Philly job log"):
        ingest_philly(Settings(data_dir=data_dir), cluster(bad))
    with pytest.raises(IngestError, match="does not exist"):
        ingest_philly(Settings(data_dir=data_dir), cluster(tmp_path / "nowhere"))
    assert not (data_dir / "parquet").exists()


def test_a_utilization_file_past_the_size_bound_is_refused(data_dir: Path) -> None:
    """The utilization files are read within `[files]` (files.byte_blocks, as OpenMetrics)."""
    size = (PHILLY / "cluster_gpu_util").stat().st_size
    limits = FileLimits(max_size_gib=(size - 1) / (1 << 30))
    with pytest.raises(IngestError) as err:
        ingest_philly(Settings(data_dir=data_dir, files=limits), cluster())
    assert str(err.value).startswith(
        f"{PHILLY / 'cluster_gpu_util'} holds more than {size - 1:,} bytes of text ([files] "
        "max_size_gib = "
    )
    assert str(err.value).endswith("refused as too large; nothing was written.")
    assert not list((data_dir / "parquet").rglob("*.parquet"))


def test_headers() -> None:
    check_header(
        "cluster_gpu_util", "time,machineId," + ",".join(f"gpu{i}_util" for i in range(8)) + "\n"
    )
    with pytest.raises(PhillyFormatError):
        check_header("cluster_gpu_util", "time,machine_id,cpu_util\n")


def test_cli_one_off(data_dir: Path) -> None:
    res = CliRunner().invoke(
        app, ["ingest", "philly", str(PHILLY), "--cluster", "ph", "--data-dir", str(data_dir)]
    )
    assert res.exit_code == 0, res.output
    assert "ph/philly: 25 records accepted, 7 quarantined" in res.output


line = st.one_of(
    st.text(max_size=100).map(lambda s: s.replace("\n", " ").replace("\r", " ")),
    st.lists(
        st.sampled_from(
            [
                "2017-11-05 01:30:00 PDT",
                "2017-11-05 01:30:00 PST",
                "m1",
                "NA",
                "",
                "12.5",
                "-3",
                "1e400",
                "x",
            ]
        ),
        max_size=20,
    ).map(",".join),
)


@settings(max_examples=100, deadline=None)
@given(st.lists(line, max_size=15))
def test_fast_and_exact_paths_agree_on_arbitrary_lines(lines: list[str]) -> None:
    data = "\n".join(lines).encode()
    for kind, parse in (
        ("cluster_gpu_util", parse_gpu_util_lines),
        ("cluster_cpu_util", parse_cpu_util_lines),
        ("cluster_mem_util", parse_mem_util_lines),
    ):
        fast, fast_bad, _ = parse_chunk(kind, data, 2, "f")
        slow, slow_bad = parse(lines_frame(data.decode(), 2), "f")
        key = list(fast.columns[:-1])
        assert fast.sort(key).equals(slow.sort(key)), kind
        assert fast_bad.sort("location").equals(slow_bad.sort("location")), kind


@settings(max_examples=200, deadline=None)
@given(st.lists(line, max_size=15))
def test_util_parsers_never_crash_and_refuse_by_line(lines: list[str]) -> None:
    text = "\n".join(lines)
    frame = lines_frame(text)
    for parse in (parse_gpu_util_lines, parse_cpu_util_lines, parse_mem_util_lines):
        _, refused = parse(frame)
        locs = refused["location"].to_list()
        assert len(locs) == len(set(locs))
        assert {int(x.rsplit(":", 1)[1]) for x in locs} <= set(frame["lineno"].to_list())


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=20),
        lambda c: (
            st.lists(c, max_size=4)
            | st.dictionaries(
                st.sampled_from(
                    [
                        "status",
                        "vc",
                        "jobid",
                        "user",
                        "attempts",
                        "start_time",
                        "end_time",
                        "detail",
                        "ip",
                        "gpus",
                        "submitted_time",
                    ]
                ),
                c,
                max_size=6,
            )
        ),
        max_leaves=30,
    )
)
def test_job_log_never_crashes(obj: object) -> None:
    try:
        p = parse_job_log(json.dumps(obj))
    except PhillyFormatError:
        return
    assert p.accepted + len(p.refused) == len(obj)  # type: ignore[arg-type]


def test_repeated_machine_rows_keep_the_last_and_sort(data_dir: Path, tmp_path: Path) -> None:
    trace = tmp_path / "trace"
    shutil.copytree(PHILLY, trace)
    with open(trace / "cluster_gpu_util", "a") as fh:  # m29 at 00:08 PDT again, later in the file
        fh.write("2017-10-03 00:08:00 PDT,m29,1.0,2.0,3.0,4.0,5.0,6.0,7.0,8.0,\n")
    ingest_philly(Settings(data_dir=data_dir), cluster(trace))
    g = Warehouse(data_dir).read("gpu_samples", "philly")
    assert g.select("host", "gpu", "ts").is_unique().all()
    assert g.height == 36
    at = g.filter((pl.col("host") == "m29") & (pl.col("ts") == utc(2017, 10, 3, 7, 8)))
    assert at.sort("gpu")["util"].to_list() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
    for day in g.with_columns(pl.col("ts").dt.date().alias("d")).partition_by("d"):
        keys = day.select("host", "gpu", "ts")  # one file per UTC day, sorted
        assert keys.equals(keys.sort("host", "gpu", "ts"))


@pytest.mark.parametrize("chunk_bytes", [1 << 20, 200])
@pytest.mark.parametrize("later_is_odd", [True, False])
def test_the_later_line_wins_whichever_parser_reads_it(
    data_dir: Path, tmp_path: Path, chunk_bytes: int, later_is_odd: bool
) -> None:
    """Two rows for one machine and minute, one read in bulk and one by the exact parser (an
    18-field row): the one later in the file wins, in either order and across blocks."""
    plain = "2017-10-03 00:08:00 PDT,m29,1.0,2.0,3.0,4.0,5.0,6.0,7.0,8.0,\n"
    odd = "2017-10-03 00:08:00 PDT,m29," + ",".join(f"{k}.5," for k in range(8)) + "\n"
    trace = tmp_path / "trace"
    shutil.copytree(PHILLY, trace)
    util = trace / "cluster_gpu_util"
    header = util.read_text().splitlines()[0]
    clean = "".join(  # rows the bulk reader takes (the fixture's refused rows would send the
        # whole block to the exact parser, which keeps file order anyway)
        f"2017-10-03 00:0{m}:00 PDT,m{h},1.0,2.0,NA,NA,NA,NA,NA,NA,\n"
        for m in range(10)
        for h in (29, 30)
    )
    util.write_text(header + "\n" + clean + (plain + odd if later_is_odd else odd + plain))
    ingest_philly(Settings(data_dir=data_dir), cluster(trace), chunk_bytes=chunk_bytes)
    g = Warehouse(data_dir).read("gpu_samples", "philly")
    assert g.select("host", "gpu", "ts").is_unique().all()
    at = g.filter((pl.col("host") == "m29") & (pl.col("ts") == utc(2017, 10, 3, 7, 8)))
    expected = [k + 0.5 for k in range(8)] if later_is_odd else [float(k) for k in range(1, 9)]
    assert at.sort("gpu")["util"].to_list() == expected


@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            st.sampled_from(["m1", "m2", "m10"]),
            st.integers(min_value=0, max_value=3),
            st.integers(min_value=0, max_value=30),  # minutes
        ),
        max_size=60,
    ),
    order=st.sampled_from(["file", "by_time", "by_host"]),
)
def test_order_last_wins_equals_a_full_sort(rows: list[tuple[str, int, int]], order: str) -> None:
    """The radix-sort-and-merge path gives what a full sort by (host, gpu, ts, lineno) keeping
    the last of each key gives, whatever order the rows come in."""
    from gpuwaste.ingest.philly.source import order_last_wins

    df = pl.DataFrame(
        {
            "host": [h for h, _, _ in rows],
            "gpu": pl.Series([g for _, g, _ in rows], dtype=pl.Int16),
            "ts": [utc(2017, 10, 3, 0, m) for _, _, m in rows],
            "util": [float(i) for i in range(len(rows))],
            "lineno": list(range(2, len(rows) + 2)),
        },
        schema={
            "host": pl.String,
            "gpu": pl.Int16,
            "ts": pl.Datetime("us", "UTC"),
            "util": pl.Float64,
            "lineno": pl.Int64,
        },
    )
    if order == "by_time":
        df = df.sort("ts", maintain_order=True)
    elif order == "by_host":
        df = df.sort("host", maintain_order=True)
    expected = (
        df.sort("host", "gpu", "ts", "lineno")
        .group_by("host", "gpu", "ts", maintain_order=True)
        .last()
        .drop("lineno")
    )
    got = order_last_wins(df, ["gpu", "ts"])
    assert got.equals(expected.select(got.columns))


def test_philly_jobs_replace_jobs_derived_from_telemetry_labels(
    data_dir: Path, tmp_path: Path
) -> None:
    """Philly's job log is a scheduler record: jobs an OpenMetrics file's `hpc_job` labels gave
    the same cluster, and their GPU spans, give way to it; ingesting the file again derives none."""
    om = tmp_path / "metrics.om"
    write_synthetic_openmetrics(Synthetic(points=40, node=False), om)
    telemetry = ClusterConfig(name="philly", openmetrics=OpenMetricsSource(file=om))
    s = Settings(data_dir=data_dir)
    ingest_openmetrics(s, telemetry, om)
    wh = Warehouse(data_dir)
    assert set(wh.read("jobs", "philly")["source"]) == {"telemetry"}
    ingest_philly(s, cluster())
    for _ in range(2):  # after the Philly ingest, and after the file is ingested again
        assert set(wh.read("jobs", "philly")["source"]) == {"philly"}
        assert not (wh.cluster_dir("job_gpus", "philly") / "openmetrics.parquet").exists()
        assert wh.read("job_gpus", "philly").height == 17
        ingest_openmetrics(s, telemetry, om)
