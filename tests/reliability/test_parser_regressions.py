"""Inputs the fuzzers found that a parser mishandled, kept as plain regression tests."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from gpuwaste.config import ClusterConfig, IngestSettings, Settings, SlurmSource
from gpuwaste.ingest.base import IngestResult
from gpuwaste.ingest.philly.parse import CPU_UTIL, GPU_UTIL, MEM_UTIL, parse_chunk, parse_job_log
from gpuwaste.ingest.philly.source import stage_file
from gpuwaste.ingest.prometheus.openmetrics_parse import parse_text
from gpuwaste.ingest.prometheus.openmetrics_source import ingest_openmetrics
from gpuwaste.ingest.prometheus.parse import ResponseError, parse_body
from gpuwaste.ingest.slurm.parse import parse_sacct
from gpuwaste.ingest.slurm.source import ingest_slurm
from gpuwaste.ingest.tabular.parse import JobsMapping, SamplesMapping, map_jobs, map_samples
from gpuwaste.warehouse.store import Warehouse


def test_philly_nan_and_infinite_values_are_refused_not_stored() -> None:
    # Found by test_fuzz_philly_csv: "NaN" passed the 0-100 range check (NaN < 0 is false) and
    # became a NaN sample; "inf" memory totals gave NaN used shares.
    mem = b"2017-10-03 00:06:00 PDT,m29,NaN,2030730.6667\n2017-10-03 00:08:00 PDT,m29,inf,1.0\n"
    good, refused, records = parse_chunk(MEM_UTIL, mem, 2, "m")
    assert good.height == 0 and records == 2
    assert refused["location"].to_list() == ["m:2", "m:3"]
    cpu = b"2017-10-03 00:06:00 PDT,m29,NaN\n2017-10-03 00:07:00 PDT,m29,12.5\n"
    good, refused, _ = parse_chunk(CPU_UTIL, cpu, 2, "c")
    assert good["cpu_util"].to_list() == [12.5]
    assert refused["location"].to_list() == ["c:2"]
    gpu = b"2017-10-03 00:06:00 PDT,m29,nan,1,2,3,4,5,6,7,\n"
    good, refused, _ = parse_chunk(GPU_UTIL, gpu, 2, "g")
    assert good.height == 0 and refused.height == 1


def test_philly_extra_field_na_is_refused_by_both_readers() -> None:
    # Found by tests/test_ingest_philly.py's hypothesis test while fixing issue #47: a CPU line
    # with one field too many, `NA`, passed the fast reader as "a trailing comma" (it reads NA
    # as null, as an empty field) while the line-by-line reader refused it.
    for data in (b"2017-11-05 01:30:00 PDT,m1,NA,NA\n", b"2017-11-05 01:30:00 PDT,m1,3,NA\n"):
        good, refused, records = parse_chunk(CPU_UTIL, data, 2, "c")
        assert good.height == 0 and records == 1
        assert refused["reason"].to_list() == ["wrong field count: 4"]
    good, refused, _ = parse_chunk(CPU_UTIL, b"2017-11-05 01:30:00 PDT,m1,3,\r\n", 2, "c")
    assert good["cpu_util"].to_list() == [3.0] and refused.height == 0


def test_prometheus_result_type_that_is_a_list_is_a_response_error() -> None:
    # Found by test_fuzz_prometheus_json: `"resultType": [...]` raised TypeError (unhashable
    # list in a set membership test) instead of the ResponseError every bad answer gets.
    body = b'{"status":"success","data":{"resultType":[1],"result":[]}}'
    with pytest.raises(ResponseError, match="neither matrix nor vector"):
        parse_body(body)


def test_generic_csv_nan_and_huge_numbers_are_refused_not_a_crash() -> None:
    # Found by test_fuzz_generic_csv: a GPU index "NaN" passed the checks (NaN == NaN in polars)
    # and the Int16 cast then raised InvalidOperationError for the whole file; NaN utilization
    # and memory were stored as NaN.
    m = SamplesMapping(time="t", host="h", gpu="g", util="u", mem_used_mib="mu", mem_total_mib="mt")
    t = "2026-11-01T10:00:00Z"
    df = pl.DataFrame(
        {
            "t": [t] * 6,
            "h": ["n1"] * 6,
            "g": ["NaN", "inf", "99999", "0", "0", "1"],
            "u": ["1", "1", "1", "NaN", "5", "5"],
            "mu": ["1", "1", "1", "1", "NaN", "1"],
            "mt": ["2", "2", "2", "2", "2", "2"],
        }
    )
    good, refused = map_samples(df, m, "f.csv", (pl.int_range(pl.len()) + 2).cast(pl.String))
    assert good.height == 1 and good["gpu"].to_list() == [1]
    assert [r.reason for r in refused] == [
        "bad GPU index",
        "bad GPU index",
        "bad GPU index",
        "utilization not a number in 0-100",
        "memory not a number",
    ]


def test_openmetrics_line_starting_with_nul_is_refused_not_dropped() -> None:
    # Found by test_fuzz_openmetrics: the "same series as the previous line" shortcut started
    # with a "\x00" sentinel key, so a first line "\x00 0" matched it and vanished: neither a
    # sample nor refused.
    parsed = parse_text('\x00 0\nDCGM_FI_DEV_GPU_UTIL{gpu="0"} 5 1700000000000\n')
    assert [r.location for r in parsed.refused] == ["<text>:1"]
    assert sum(s.n_samples for s in parsed.series.values()) == 1


@pytest.mark.parametrize("ts", ["9223372038055", "1e400", '"abc"', "null"])
def test_prometheus_timestamp_out_of_range_or_not_a_number_is_a_response_error(ts: str) -> None:
    # Found by test_fuzz_prometheus_json: a timestamp of 9.2e12 s overflowed the microsecond
    # cast (polars InvalidOperationError); a string timestamp raised TypeError.
    for key, pair in (("value", f'[{ts},"1"]'), ("values", f'[[{ts},"1"]]')):
        body = f'{{"status":"success","data":{{"resultType":"matrix","result":[{{"metric":{{}},"{key}":{pair}}}]}}}}'
        with pytest.raises(ResponseError, match="timestamp"):
            parse_body(body.encode())


def test_openmetrics_timestamp_out_of_range_is_refused_by_line() -> None:
    parsed = parse_text('a 1 1e300\na 1 nan\na 1 -inf\na{x="1"} 1 5\n# EOF\n', location="f")
    assert [(r.location, r.reason) for r in parsed.refused] == [
        ("f:1", "timestamp out of range"),
        ("f:2", "timestamp out of range"),
        ("f:3", "timestamp out of range"),
    ]
    assert sum(s.n_samples for s in parsed.series.values()) == 1


def test_generic_csv_epoch_before_year_one_is_refused_not_a_crash() -> None:
    # Found by test_fuzz_generic_csv: an epoch of -99999999999 s (year -1199) passed the range
    # check and map_jobs crashed turning it into a Python datetime.
    m = JobsMapping(job_id="id", start="s", end="e", time_format="epoch_s")
    df = pl.DataFrame({"id": ["j1", "j2"], "s": ["-99999999999", "1793527260"], "e": ["", ""]})
    jobs, _gpus, refused = map_jobs(df, m, "j.csv", (pl.int_range(pl.len()) + 2).cast(pl.String))
    assert jobs["job_id"].to_list() == ["j2"]
    assert [r.location for r in refused] == ["j.csv:2"]


def test_generic_csv_gpu_count_nan_is_refused_not_a_crash() -> None:
    # Found by test_fuzz_generic_csv: a GPU count "NaN" failed the Int32 cast for the whole file.
    m = JobsMapping(job_id="id", gpus="n")
    df = pl.DataFrame({"id": ["j1", "j2", "j3"], "n": ["NaN", "inf", "2"]})
    jobs, _gpus, refused = map_jobs(df, m, "j.csv", (pl.int_range(pl.len()) + 2).cast(pl.String))
    assert jobs["gpus"].to_list() == [2]
    assert [r.reason for r in refused] == ["GPU count not a number"] * 2


# ------------------------------------------------- issue #47: what the warehouse cannot file

SACCT_HEADER = (
    "JobID|JobIDRaw|User|Account|Partition|State|Submit|Start|End|Elapsed|AllocTRES|NodeList"
)


def _sacct(job: int, end: str = "2026-11-01T11:00:00", name_user: str = "u") -> str:
    return (
        f"{job}|{job}|{name_user}|a|gpu|COMPLETED|2026-11-01T10:00:00|2026-11-01T10:00:00|{end}"
        "|01:00:00|gres/gpu=1|n1"
    )


def test_sacct_year_9999_is_refused_by_record() -> None:
    # An end in 9999-12-31 was accepted; a sample there crashed the day arithmetic of the
    # warehouse (OverflowError: date value out of range). The record is refused, whatever the
    # settings (no TimeBounds given: only the warehouse's days apply).
    text = "\n".join([SACCT_HEADER, _sacct(1, "9999-12-31T23:59:59"), _sacct(2)])
    res = parse_sacct(text, location="s")
    assert res.jobs["job_id"].to_list() == ["2"]
    assert [(r.location, r.reason.split(":")[0]) for r in res.refused] == [
        ("s:2", "outside the warehouse's days")
    ]


def test_a_sample_in_year_9999_is_refused_not_a_crash(tmp_path: Path) -> None:
    # The crash of issue #47 (store._days: OverflowError), with a tolerance so large that only
    # the warehouse's own limit can refuse the sample.
    f = tmp_path / "m.om"
    f.write_text(
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-x",Hostname="n1"} 10 253402300799\n'
        'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-x",Hostname="n1"} 10 1790000000\n# EOF\n'
    )
    settings = Settings(data_dir=tmp_path / "wh", ingest=IngestSettings(future_tolerance_s=1e12))
    result = ingest_openmetrics(settings, ClusterConfig(name="c"), f)
    assert result.accepted == 1
    assert [r.reason.split(":")[0] for r in result.refused] == ["outside the warehouse's days"]
    assert "host n1" in result.refused[0].reason


def test_generic_csv_and_philly_year_9999_are_refused_by_record(tmp_path: Path) -> None:
    samples = SamplesMapping(time="t", host="h", gpu="g", util="u")
    df = pl.DataFrame(
        {"t": ["9999-12-31T12:00:00Z", "2026-11-01T10:00:00Z"], "h": ["n1", "n2"], "g": ["0"] * 2}
    ).with_columns(u=pl.lit("5"))
    loc = (pl.int_range(pl.len()) + 2).cast(pl.String)
    good, refused = map_samples(df, samples, "s.csv", loc)
    assert good["host"].to_list() == ["n2"]
    assert [r.reason.split(",")[0] for r in refused] == ["outside the warehouse's days: host n1"]
    jobs_m = JobsMapping(job_id="id", start="s", end="e")
    jobs = pl.DataFrame(
        {"id": ["j1", "j2"], "s": ["2026-11-01T10:00:00Z"] * 2, "e": ["9999-12-31T00:00:00Z", ""]}
    )
    kept, _gpus, refused = map_jobs(jobs, jobs_m, "j.csv", loc)
    assert kept["job_id"].to_list() == ["j2"]
    assert [r.location for r in refused] == ["j.csv:2"]
    # Philly: a job and a utilization line in 9999 (the line: PST + 8 h is year 10000)
    log = (
        '[{"jobid": "a", "status": "Pass", "submitted_time": "9999-12-30 10:00:00", '
        '"attempts": []}, {"jobid": "b", "status": "Pass", "submitted_time": '
        '"2017-10-03 00:00:00", "attempts": []}]'
    )
    parsed = parse_job_log(log, location="log")
    assert parsed.jobs["job_id"].to_list() == ["b"]
    assert parsed.refused[0].reason.startswith("outside the warehouse's days")
    util = tmp_path / GPU_UTIL
    util.write_text(
        "time,machineId,gpu0_util,gpu1_util,gpu2_util,gpu3_util,gpu4_util,gpu5_util,gpu6_util,"
        "gpu7_util\n9999-12-31 23:59:00 PST,m1,1,2,3,4,5,6,7,8\n"
        "2017-10-03 00:06:00 PDT,m1,1,2,3,4,5,6,7,8\n"
    )
    records, bad = stage_file(util, GPU_UTIL, tmp_path / "stage", "America/Los_Angeles")
    assert records == 2
    assert bad["location"].to_list() == [f"{util}:2"]
    assert bad["reason"][0].startswith("outside the warehouse's days: host m1")


# --------------------------------------------------------- issue #47: sacct's encodings


def _slurm(tmp_path: Path, data: bytes) -> IngestResult:
    f = tmp_path / "sacct.txt"
    f.write_bytes(data)
    cluster = ClusterConfig(name="c", slurm=SlurmSource(file=f))
    return ingest_slurm(Settings(data_dir=tmp_path / "wh"), cluster)


def test_sacct_file_with_a_byte_order_mark_is_read(tmp_path: Path) -> None:
    # Was refused whole: "without a header line" (the first column read '\ufeffJobID').
    text = "\n".join([SACCT_HEADER, _sacct(1), _sacct(2)]) + "\n"
    result = _slurm(tmp_path, b"\xef\xbb\xbf" + text.encode())
    assert result.accepted == 2 and not result.refused


def test_one_latin1_byte_refuses_its_record_only(tmp_path: Path) -> None:
    # Was: the whole 290-record file refused as "not a text file (not UTF-8)".
    lines = [_sacct(j) for j in range(1, 291)]
    lines[99] = _sacct(100, name_user="jos\xe9")  # Latin-1 é, line 101 of the file
    data = "\n".join([SACCT_HEADER, *lines]).encode("latin-1") + b"\n"
    result = _slurm(tmp_path, data)
    assert result.accepted == 289
    assert [(r.location.rsplit(":", 1)[1], r.reason) for r in result.refused] == [
        ("101", "not UTF-8 text: a byte of another encoding")
    ]
    assert "jos\\xe9" in result.refused[0].raw
    q = Warehouse(tmp_path / "wh").read("quarantine", "c")
    assert q.height == 1 and "jos\\xe9" in q["raw"][0]
    assert Warehouse(tmp_path / "wh").read("jobs", "c").height == 289
