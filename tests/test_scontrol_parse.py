"""`scontrol show job -d` -> per-node GPU indices, on real and recorded output."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuwaste.ingest.slurm.scontrol_parse import ScontrolFormatError, parse_scontrol
from gpuwaste.ingest.slurm_notation import expand_indices
from tests.conftest import FIXTURES

DATA = Path(__file__).parent / "data" / "scontrol"


def pairs(df: object) -> set[tuple[str, str, int]]:
    return {(r[0], r[2], r[3]) for r in df.rows()}  # type: ignore[attr-defined]


def test_deepops_dd_excerpt_with_elided_lines() -> None:
    p = parse_scontrol((FIXTURES / "scontrol" / "deepops_show_jobid_dd_excerpt.txt").read_text())
    assert p.accepted == 1 and p.refused == []
    assert pairs(p.gpus) == {("106", "gpu01", 0)}


def test_toil_records_without_d_give_no_indices() -> None:
    p = parse_scontrol((FIXTURES / "scontrol" / "toil_astron_2021_show_job.txt").read_text())
    assert p.accepted == 3 and p.refused == [] and p.gpus.height == 0


def test_recorded_arrays_het_jobs_typed_gres_and_a_broken_record() -> None:
    path = DATA / "two_jobs_show_job_d.txt"
    p = parse_scontrol(path.read_text(), str(path))
    got = pairs(p.gpus)
    assert {(j, h, g) for j, h, g in got if j == "1001"} == {
        ("1001", "node07", 0),
        ("1001", "node07", 2),
        ("1001", "node07", 3),
        ("1001", "node07", 5),
    }
    assert {(h, g) for j, h, g in got if j == "1003_4"} == {
        ("gpu-a1", 0),
        ("gpu-a1", 1),
        ("gpu-a2", 0),
        ("gpu-a2", 1),
        ("gpu-b3", 6),
        ("gpu-b3", 7),
    }
    assert {(h, g) for j, h, g in got if j == "1010+1"} == {
        (h, g) for h in ("node02", "node03") for g in (4, 5, 6, 7)
    }
    raw = dict(zip(p.gpus["job_id"], p.gpus["job_id_raw"], strict=True))
    assert raw["1003_4"] == "1007" and raw["1010+1"] == "1011"
    assert p.accepted == 3
    assert len(p.refused) == 1 and p.refused[0].location == f"{path}:29"  # the record's JobId= line
    assert p.refused[0].reason.startswith("bad node detail line")


def test_expand_indices() -> None:
    assert expand_indices("0-3,5") == [0, 1, 2, 3, 5]
    assert expand_indices("N/A") == []
    with pytest.raises(ValueError):
        expand_indices("3-1")


def test_refuses_other_text() -> None:
    with pytest.raises(ScontrolFormatError):
        parse_scontrol("JobID|State\n1|COMPLETED\n")


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_never_crashes(text: str) -> None:
    try:
        p = parse_scontrol("JobId=1 JobName=x\n" + text)
    except ScontrolFormatError:
        return
    assert p.accepted + len(p.refused) >= 1


# `scontrol --json show job`, written from Slurm's source (not captured): the fields
# parse_scontrol_json reads, in data_parser v0.0.40's shape (ids as {"set", "infinite",
# "number"}; gres_detail one string per node of `nodes`: SchedMD/slurm src/api/job_info.c and
# src/plugins/data_parser/v0.0.40/parsers.c, tests/fixtures/README.md).
SCONTROL_JSON = """{"jobs": [
 {"job_id": 1001, "nodes": "node07", "gres_detail": ["gpu:4(IDX:0,2-3,5)"],
  "array_job_id": {"set": true, "infinite": false, "number": 0},
  "array_task_id": {"set": false, "infinite": false, "number": 0},
  "het_job_id": {"set": true, "infinite": false, "number": 0},
  "het_job_offset": {"set": true, "infinite": false, "number": 0}},
 {"job_id": 1007, "nodes": "gpu-a[1-2],gpu-b3",
  "gres_detail": ["gpu:a100:2(IDX:0-1)", "gpu:a100:2(IDX:0-1)", "gpu:a100:2(IDX:6-7)"],
  "array_job_id": {"set": true, "infinite": false, "number": 1003},
  "array_task_id": {"set": true, "infinite": false, "number": 4}},
 {"job_id": 1011, "nodes": "node[02-03]", "gres_detail": ["gpu:1(IDX:4)", "gpu:1(IDX:5)"],
  "het_job_id": 1010, "het_job_offset": 1},
 {"job_id": 1012, "nodes": "", "gres_detail": [], "job_state": ["PENDING"]},
 {"job_id": 1099, "nodes": "node[09-07]", "gres_detail": ["gpu:4(IDX:0-3)"]}
]}"""


def test_json_output_gives_the_same_pairs_per_node() -> None:
    from gpuwaste.ingest.slurm.scontrol_parse import parse_any

    p = parse_any(SCONTROL_JSON, "sc.json")
    assert p.accepted == 4
    assert [(r.location, r.reason[:22]) for r in p.refused] == [
        ("sc.json:job 4", "bad node detail: desce")
    ]
    assert pairs(p.gpus) == {
        *(("1001", "node07", g) for g in (0, 2, 3, 5)),
        *(("1003_4", h, g) for h in ("gpu-a1", "gpu-a2") for g in (0, 1)),
        ("1003_4", "gpu-b3", 6),
        ("1003_4", "gpu-b3", 7),
        ("1010+1", "node02", 4),
        ("1010+1", "node03", 5),
    }
    assert set(p.gpus.filter(p.gpus["job_id"] == "1003_4")["job_id_raw"]) == {"1007"}
    with pytest.raises(ScontrolFormatError, match='no "jobs" list'):
        parse_any('{"nodes": []}')
