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
