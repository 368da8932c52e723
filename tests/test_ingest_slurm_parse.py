"""The sacct parser on real output (tests/fixtures) and on recorded quirks (tests/data/sacct)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuwaste.ingest.slurm.parse import (
    SacctFormatError,
    SacctOptions,
    columns_from_command,
    gpu_count,
    parse_sacct,
)
from gpuwaste.ingest.slurm_notation import map_state
from tests.conftest import FIXTURES

SACCT = FIXTURES / "sacct"
DATA = Path(__file__).parent / "data" / "sacct"
REPORTSEFF_COLS = [
    "AdminComment",
    "AllocCPUS",
    "Elapsed",
    "JobID",
    "JobIDRaw",
    "MaxRSS",
    "NNodes",
    "NTasks",
    "ReqMem",
    "State",
    "Timelimit",
    "TotalCPU",
]


def utc(*a: int) -> datetime:
    return datetime(*a, tzinfo=UTC)  # type: ignore[misc]


def by_id(df: pl.DataFrame) -> dict[str, dict[str, object]]:
    return {r["job_id"]: r for r in df.iter_rows(named=True)}


def test_aalto_semicolon_pipe_delimiter_with_header_and_steps() -> None:
    text = (SACCT / "slurm2sql_aalto_2019_delim_semicolon_pipe.txt").read_text()
    p = parse_sacct(text, SacctOptions(timezone="Europe/Helsinki"), "aalto")
    assert p.delimiter == ";|;"
    assert p.accepted == 5 and p.refused == []
    jobs = by_id(p.jobs)
    assert sorted(jobs) == ["43974388", "43977780"]
    j = jobs["43974388"]
    assert j["state"] == "killed" and j["raw_state"] == "CANCELLED by 1300204"
    assert j["user"] == "user1" and j["vc"] == "cs" and j["hosts"] == ["pe2"]
    # 2019-07-31T22:29:14 in Helsinki (EEST, +03:00); the job row's end, not the later .batch end.
    assert j["start_ts"] == utc(2019, 7, 31, 19, 29, 14)
    assert j["end_ts"] == utc(2019, 7, 31, 23, 2, 39)
    assert j["is_debug"] is False  # spawner-jupyterhub does not match the default pattern
    assert jobs["43977780"]["is_debug"] is True  # _interactive
    p2 = parse_sacct(text, SacctOptions(vc_from="partition"))
    assert by_id(p2.jobs)["43977780"]["vc"] == "interactive"


def test_toil_no_header_needs_columns() -> None:
    text = (SACCT / "toil_astron_2021_P_noheader.txt").read_text()
    with pytest.raises(SacctFormatError, match="without a header"):
        parse_sacct(text)
    p = parse_sacct(text, SacctOptions(columns=("JobIDRaw", "State", "ExitCode")))
    assert p.accepted == 22 and p.refused == [] and p.pending == 1
    states = {k: (v["state"], v["raw_state"]) for k, v in by_id(p.jobs).items()}
    assert states == {
        "609663": ("unsuccessful", "FAILED"),
        "754725": ("unsuccessful", "TIMEOUT"),
        "765096": ("unsuccessful", "FAILED"),
        "767925": ("unsuccessful", "FAILED"),
        "785023": ("unsuccessful", "FAILED"),
        "789456": ("unsuccessful", "FAILED"),
        "789724": ("running", "RUNNING"),
        "789869": ("passed", "COMPLETED"),
    }


def test_reportseff_caret_delimiter_leading_and_trailing_delimiters() -> None:
    text = (SACCT / "reportseff_princeton_steps_caret_delim.txt").read_text()
    p = parse_sacct(text, SacctOptions(columns=tuple(REPORTSEFF_COLS)))
    assert p.delimiter == "^|^"
    assert p.accepted == 39 and p.refused == []
    assert p.jobs["job_id"].to_list() == ["65638294"]
    assert p.jobs["state"].to_list() == ["passed"]


def test_reportseff_array_tasks_keep_display_and_raw_ids() -> None:
    cols = [*REPORTSEFF_COLS[:10], "TRESUsageOutTot", *REPORTSEFF_COLS[10:]]
    text = (SACCT / "reportseff_princeton_array_energy_caret_delim.txt").read_text()
    p = parse_sacct(text, SacctOptions(columns=tuple(cols)))
    assert p.accepted == 12 and p.refused == []
    # job_id is JobIDRaw (what SLURM_JOB_ID and the DCGM hpc_job label hold).
    ids = dict(zip(p.jobs["slurm_job_id"], p.jobs["job_id"], strict=True))
    assert ids == {
        "37403870_1": "37403937",
        "37403870_2": "37403938",
        "37403870_3": "37403939",
        "37403870_4": "37403870",
    }


def test_reportseff_single_record_without_newline() -> None:
    cols = "AllocCPUS,Elapsed,JobID,JobIDRaw,MaxRSS,NNodes,ReqMem,State,Timelimit,TotalCPU"
    text = (SACCT / "reportseff_princeton_cancelled_no_newline.txt").read_text()
    assert not text.endswith("\n")
    p = parse_sacct(text, SacctOptions(columns=tuple(cols.split(","))))
    assert p.jobs.rows() and by_id(p.jobs)["23000233"]["state"] == "killed"


def test_recorded_quirks_berlin() -> None:
    path = DATA / "berlin_quirks_parsable2.txt"
    p = parse_sacct(path.read_text(), SacctOptions(timezone="Europe/Berlin"), str(path))
    jobs = by_id(p.jobs)
    # Across the 2026-03-29 spring-forward: 00:15 CET = 23:15Z, 04:15 CEST = 02:15Z.
    assert jobs["1001"]["start_ts"] == utc(2026, 3, 28, 23, 15)
    assert jobs["1001"]["end_ts"] == utc(2026, 3, 29, 2, 15)
    assert jobs["1001"]["gpus"] == 4 and jobs["1001"]["hosts"] == ["node07"]
    assert jobs["1002"]["is_debug"] is True and jobs["1002"]["gpus"] == 1  # gres/gpu:a100=1
    assert jobs["1002"]["state"] == "killed"
    assert jobs["1007"]["slurm_job_id"] == "1003_4"
    assert jobs["1007"]["gpus"] == 6  # typed and untyped both printed: not doubled
    assert jobs["1007"]["hosts"] == ["gpu-a1", "gpu-a2", "gpu-b3"]
    assert jobs["1007"]["state"] == "unsuccessful"
    assert "1003" not in jobs and p.pending == 1  # 1003_[5-9]
    assert jobs["1010"]["slurm_job_id"] == "1010+0"
    assert jobs["1010"]["state"] == "running" and jobs["1010"]["end_ts"] is None
    assert jobs["1011"]["slurm_job_id"] == "1010+1"
    assert jobs["1011"]["hosts"] == ["node02", "node03"] and jobs["1011"]["gpus"] == 8
    assert jobs["1012"]["state"] == "unsuccessful"  # OUT_OF_MEMORY
    assert jobs["1013"]["state"] == "unsuccessful"  # NODE_FAIL
    assert jobs["1014"]["state"] == "killed"  # PREEMPTED (choice)
    assert jobs["1015"]["state"] == "running"  # REQUEUED
    assert jobs["1016"]["gpus"] == 0 and jobs["1016"]["hosts"] == ["cn001", "cn002", "cn010"]
    assert jobs["1017"]["start_ts"] is None and jobs["1017"]["hosts"] == []
    assert jobs["1030"]["name"] == "orphan_step" and jobs["1030"]["gpus"] == 1
    reasons = {r.location.rsplit(":", 1)[1]: r.reason for r in p.refused}
    assert reasons["19"].startswith("wrong field count")
    assert reasons["20"] == "unparseable time"
    assert reasons["21"].startswith("negative GPU count")
    assert reasons["22"].startswith("end before start")
    assert reasons["23"].startswith("bad host list")
    assert reasons["24"].startswith("unknown state")
    assert all(r.location.startswith(str(path)) for r in p.refused)
    lines = [ln for ln in path.read_text().splitlines()[1:] if ln.strip()]
    assert p.accepted + len(p.refused) == len(lines)


def test_p_trailing_delimiter_and_allocgres() -> None:
    p = parse_sacct((DATA / "p_trailing_delim.txt").read_text())
    assert p.refused == [] and p.accepted == 3
    jobs = by_id(p.jobs)
    assert jobs["2001"]["is_debug"] is True and jobs["2002"]["is_debug"] is True
    cols = ("JobID", "JobIDRaw", "State", "Start", "End", "AllocGRES", "NodeList")
    p = parse_sacct((DATA / "old_allocgres_noheader.txt").read_text(), SacctOptions(columns=cols))
    jobs = by_id(p.jobs)
    assert jobs["3001"]["gpus"] == 2 and jobs["3002"]["gpus"] == 4
    assert jobs["3002"]["end_ts"] is None


def test_helpers() -> None:
    assert gpu_count("billing=8,cpu=8,gres/gpu:a100=4,gres/gpu=4,mem=64G,node=1") == 4
    assert gpu_count("gres/gpu:a100=2,gres/gpu:v100=1") == 3
    assert gpu_count("cpu=4,mem=8G") == 0
    assert gpu_count("gpu:tesla:2", gres_style=True) == 2
    assert map_state("CANCELLED by 1234") == "killed"
    assert map_state("CANCELLED+") == "killed"
    assert map_state("BOGUS") is None
    cmd = ["sacct", "-P", "-n", "--format=JobID,State,Start%20", "-a"]
    assert columns_from_command(cmd) == ("JobID", "State", "Start")
    assert columns_from_command(["sacct", "-o", "JobID,State"]) == ("JobID", "State")


def test_refuses_what_is_not_sacct() -> None:
    with pytest.raises(SacctFormatError, match=r"JSON: .*`gpuwaste ingest philly`"):
        parse_sacct('{"jobs": []}\n')
    with pytest.raises(
        SacctFormatError, match=r"Philly utilization file.*`gpuwaste ingest philly`"
    ):
        parse_sacct("time,machineId,gpu0_util\n2017-10-03 00:08:00 PDT,m29,60.8\n")
    om = "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n"
    with pytest.raises(SacctFormatError, match=r"OpenMetrics text.*`gpuwaste ingest openmetrics`"):
        parse_sacct(om + 'DCGM_FI_DEV_GPU_UTIL{gpu="0"} 0\n')
    with pytest.raises(SacctFormatError, match=r"`scontrol show job` output.*--scontrol"):
        parse_sacct("JobId=42 JobName=train\n   UserId=alice(1000)\n")
    with pytest.raises(SacctFormatError, match=r"header|JobID"):
        parse_sacct("User|Account\nalice|vision\n")


def test_an_empty_file_is_refused_but_no_jobs_in_the_window_is_fine() -> None:
    """No header and no records is not sacct output; a header alone (or `-n` output with its
    columns given) is a window in which no job ran."""
    for empty in ("", "\n", "  \n\n"):
        with pytest.raises(SacctFormatError, match="empty: no header line and no records"):
            parse_sacct(empty)
    assert parse_sacct("", SacctOptions(columns=("JobID", "State"))).jobs.height == 0
    header_only = parse_sacct("JobID|State|Start|End|AllocTRES|NodeList\n")
    assert header_only.jobs.height == 0 and not header_only.refused


HEADER = "JobID|JobName|User|Account|Partition|State|Submit|Start|End|AllocTRES|NodeList"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(codec="utf-8"), max_size=120), max_size=12))
def test_never_crashes_and_every_line_is_accepted_or_quarantined(body: list[str]) -> None:
    lines = [ln.replace("\n", " ").replace("\r", " ") for ln in body]
    text = "\n".join([HEADER, *lines])
    p = parse_sacct(text, SacctOptions(timezone="Europe/Berlin"))
    records = [ln for ln in text.split("\n")[1:] if ln.strip()]
    assert p.accepted + len(p.refused) == len(records)


field = st.sampled_from(
    [
        "",
        "1",
        "12_3",
        "7+1",
        "5.batch",
        "COMPLETED",
        "RUNNING",
        "CANCELLED by 3",
        "Unknown",
        "2026-01-01T00:00:00",
        "2026-02-30T00:00:00",
        "node[1-2]",
        "n[2-1]",
        "gres/gpu=2",
        "gres/gpu=-1",
        "None",
        "x|y",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(field, min_size=9, max_size=13), max_size=10))
def test_structured_garbage_is_accepted_or_quarantined(rows: list[list[str]]) -> None:
    text = "\n".join([HEADER, *("|".join(r) for r in rows)])
    p = parse_sacct(text)
    records = [ln for ln in text.split("\n")[1:] if ln.strip()]
    assert p.accepted + len(p.refused) == len(records)
    assert set(p.jobs["state"].to_list()) <= {"passed", "killed", "unsuccessful", "running"}
