"""The evidence that ties a job to its GPUs without a job label, on hand-computed cases:
whole hosts, Slurm IDX joined by minor number or index, and the order in which `build_job_gpus`
takes the kinds of evidence (gpuwaste/warehouse/gpu_from.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import polars as pl

from gpuwaste.ingest.gpu_evidence import (
    HOST_GPUS_SCHEMA,
    MINORS_SCHEMA,
    resolve_minors,
    whole_host_pairs,
)
from gpuwaste.ingest.gpu_indices import UNKNOWN_GPU, build_job_gpus

T0, T1 = datetime(2026, 11, 1, 10, tzinfo=UTC), datetime(2026, 11, 1, 11, tzinfo=UTC)

# host a: GPUs 0-3 with minor numbers 3, 2, 1, 0; host b: GPUs 0-1 without minor numbers;
# host m: GPU 0 whole and GPU 1 split into MIG instances
HOSTS = pl.DataFrame(
    [
        *[("a", g, 3 - g, False) for g in range(4)],
        ("b", 0, None, False),
        ("b", 1, None, False),
        ("m", 0, None, False),
        ("m", 1, None, True),
    ],
    schema=HOST_GPUS_SCHEMA,
    orient="row",
)


def jobs(*rows: tuple[str, list[str], int | None, str | None]) -> pl.DataFrame:
    return pl.DataFrame(
        [(j, j, T0, T1, gpus, hosts, mig, None) for j, hosts, gpus, mig in rows],
        schema={
            "job_id": pl.String(),
            "slurm_job_id": pl.String(),
            "start_ts": pl.Datetime("us", "UTC"),
            "end_ts": pl.Datetime("us", "UTC"),
            "gpus": pl.Int32(),
            "hosts": pl.List(pl.String()),
            "mig_profile": pl.String(),
            "gpu_model": pl.String(),
        },
        orient="row",
    )


def test_whole_host_needs_the_count_of_every_host() -> None:
    j = jobs(
        ("whole-a", ["a"], 4, None),
        ("half-a", ["a"], 2, None),
        ("a-and-b", ["a", "b"], 6, None),  # 4 + 2: each host gave all it has
        ("a-and-b-part", ["a", "b"], 5, None),  # which host kept one back is unknown
        ("unseen", ["a", "z"], 4, None),  # z's GPUs are not seen: not decidable
        ("mig-host", ["m"], 2, None),  # m shows MIG instances: a count names no slice
        ("count-unknown", ["b"], None, None),
        ("mig-job", ["b"], 2, "1g.10gb"),
    )
    got = whole_host_pairs(j, HOSTS).sort("job_id", "host", "gpu")
    assert got.rows() == [
        *[("a-and-b", "a", g) for g in range(4)],
        ("a-and-b", "b", 0),
        ("a-and-b", "b", 1),
        *[("whole-a", "a", g) for g in range(4)],
    ]


def minors(*rows: tuple[str, str, int]) -> pl.DataFrame:
    return pl.DataFrame([(j, j, h, m) for j, h, m in rows], schema=MINORS_SCHEMA, orient="row")


def test_idx_joins_the_minor_number_never_the_index() -> None:
    r = resolve_minors(minors(("1", "a", 0), ("1", "a", 2), ("2", "a", 7)), HOSTS)
    assert sorted(r.pairs.rows()) == [("1", "a", 1), ("1", "a", 3)]  # minor 0 is GPU 3
    assert [x.reason for x in r.refused] == [
        "Slurm IDX 7 names no GPU of host a (its samples show minor numbers 0, 1, 2, 3)"
    ]
    assert r.refused[0].location == "job 2 on a" and r.refused[0].raw == "JobId=2 Nodes=a IDX:7"


def test_without_minor_numbers_idx_is_the_index_only_when_the_operator_says_so() -> None:
    kept = minors(("1", "b", 1), ("2", "b", 5), ("3", "new", 2))
    waiting = resolve_minors(kept, HOSTS)  # gres_idx = "minor", the default
    assert waiting.pairs.is_empty() and waiting.refused == []
    assert sorted(waiting.no_minor.rows()) == [("1", "b"), ("2", "b")]  # "new": no samples yet
    by_index = resolve_minors(kept, HOSTS, "index")
    assert sorted(by_index.pairs.rows()) == [("1", "b", 1), ("3", "new", 2)]
    assert [x.reason for x in by_index.refused] == [
        "Slurm IDX 5 names no GPU of host b (its samples show GPU indices 0, 1)"
    ]
    assert by_index.no_minor.is_empty()


def frame(gpu_from: str, *rows: tuple[str, str, int]) -> pl.DataFrame:
    return pl.DataFrame(
        [(*r, gpu_from) for r in rows],
        schema={"job_id": pl.String(), "host": pl.String(), "gpu": pl.Int16(),
                "gpu_from": pl.String()},
        orient="row",
    )  # fmt: skip


def test_each_job_takes_the_first_evidence_that_names_it() -> None:
    j = jobs(("1", ["a"], 4, None), ("2", ["a"], 1, None), ("3", ["b"], 1, None),
             ("4", ["b"], 1, None))  # fmt: skip
    rows = build_job_gpus(
        j,
        [
            frame("whole-host", *[("1", "a", g) for g in range(4)]),
            frame("scontrol", ("1", "a", 0), ("2", "a", 2)),
            frame("jobstats-summary", ("2", "a", 1), ("3", "b", 0)),
            frame("telemetry-label", ("3", "b", 1)),
        ],
    )
    got = {(r["job_id"], r["gpu"], r["gpu_from"]) for r in rows.iter_rows(named=True)}
    assert got == {
        *(("1", g, "whole-host") for g in range(4)),
        ("2", 2, "scontrol"),
        ("3", 0, "jobstats-summary"),
        ("4", UNKNOWN_GPU, "unknown"),
    }
    assert set(rows["start_ts"]) == {T0} and set(rows["attempt"]) == {0}
