"""Slurm host-list expansion: the forms real NodeList / ExcNodeList values take."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuwaste.ingest.slurm_notation import HostListError, expand_hostlist


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("node07", ["node07"]),
        ("node[01-04,07]", ["node01", "node02", "node03", "node04", "node07"]),
        ("gpu-a[1-2],gpu-b3", ["gpu-a1", "gpu-a2", "gpu-b3"]),
        (
            "wn-ca-[01-02],wn-db-[01-03]",
            ["wn-ca-01", "wn-ca-02", "wn-db-01", "wn-db-02", "wn-db-03"],
        ),
        ("cn[001-002,010]", ["cn001", "cn002", "cn010"]),
        ("r[1-2]-n[1-2]", ["r1-n1", "r1-n2", "r2-n1", "r2-n2"]),
        ("n[8-11]", ["n8", "n9", "n10", "n11"]),
        ("node[1-2],node1", ["node1", "node2"]),
        ("None assigned", []),
        ("", []),
        ("(null)", []),
    ],
)
def test_expand(text: str, hosts: list[str]) -> None:
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize(
    "text",
    [
        "node[03-01]",
        "node[1-2",
        "node1-2]",
        "node[a-b]",
        "n[[1]]",
        "a,,b",
        "node[1-99999999]",
        "a b",
    ],
)
def test_refuses_what_is_not_a_host_list(text: str) -> None:
    with pytest.raises(HostListError):
        expand_hostlist(text)


@given(st.text(max_size=40))
def test_never_crashes(text: str) -> None:
    try:
        hosts = expand_hostlist(text)
    except HostListError:
        return
    assert all(isinstance(h, str) and h for h in hosts)


@given(
    st.from_regex(r"[a-z]{1,5}-?", fullmatch=True),
    st.lists(st.integers(0, 300), min_size=1, max_size=20, unique=True),
    st.integers(1, 4),
)
def test_round_trip_of_a_bracket_list(prefix: str, numbers: list[int], width: int) -> None:
    numbers.sort()
    spec = ",".join(str(n).zfill(width) for n in numbers)
    expected = [prefix + str(n).zfill(width) for n in numbers]
    assert expand_hostlist(f"{prefix}[{spec}]") == expected
