"""Every result table is what it was when `tests/data/result_digests.json` was recorded.

The reference was recorded from the code before the redesign of issue 17 (one analysis registry,
ingest by source, explicit per-job steps), on the bundled demo and on a generated cluster. A
change of code that is not meant to change results must leave every table, row for row, as it
was; one that is meant to must say so and re-record (`python -m tests.support.result_digest
--update`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.result_digest import (
    DIGESTS,
    DIGESTS_BEFORE_MODEL_SPLIT,
    before_model_split,
    before_summaries,
    build_generated,
    digest_tables,
)

# In the default suite: it is the guard of every refactoring. The demo warehouse is the session's
# (tests/conftest.py, shared with the demo's and the dashboard's tests), the generated cluster is
# 16 GPUs over one day: a few seconds of ingest and analyze in all.
REFERENCE = json.loads(DIGESTS.read_text())
BEFORE_MODEL_SPLIT = json.loads(DIGESTS_BEFORE_MODEL_SPLIT.read_text())


@pytest.fixture
def generated_warehouse(tmp_path: Path) -> Path:
    return build_generated(tmp_path)


@pytest.mark.parametrize("label", sorted(REFERENCE))
def test_every_result_table_is_unchanged(label: str, request: pytest.FixtureRequest) -> None:
    fixture = {"demo": "demo_warehouse", "generated": "generated_warehouse"}[label]
    data_dir: Path = request.getfixturevalue(fixture)
    want = REFERENCE[label]
    have = digest_tables(data_dir, sorted(want), before_summaries)
    written = sorted(p.name for p in (data_dir / "parquet").iterdir())
    assert set(want) <= set(written), f"tables no longer written: {set(want) - set(written)}"
    assert want["job_usage"]["rows"] > 50 and want["job_gpu_usage"]["rows"] > 50
    changed = {t: (want[t], have[t]) for t in want if want[t] != have[t]}
    assert not changed, f"result tables changed on the {label} warehouse: {changed}"
    # the split by GPU model only added rows and a column: the rest is as it was before it
    before = BEFORE_MODEL_SPLIT[label]
    have_before = digest_tables(
        data_dir, sorted(before), lambda n, f: before_model_split(n, before_summaries(n, f))
    )
    changed = {t: (before[t], have_before[t]) for t in before if before[t] != have_before[t]}
    assert not changed, f"the '(all)'-model rows changed on the {label} warehouse: {changed}"


def test_the_digest_sees_a_change_of_one_value(tmp_path: Path) -> None:
    """The fingerprint is not blind: one value changed in one file changes its table's digest."""
    import polars as pl

    d = tmp_path / "wh" / "parquet" / "t" / "cluster=a"
    d.mkdir(parents=True)
    frame = pl.DataFrame({"x": [1.0, 2.0, 3.0], "s": ["a", "b", None]})
    frame.write_parquet(d / "analyze.parquet")
    before = digest_tables(tmp_path / "wh", ["t"])
    frame.with_columns(
        pl.when(pl.col("x") == 2.0).then(2.001).otherwise(pl.col("x")).alias("x")
    ).write_parquet(d / "analyze.parquet")
    after = digest_tables(tmp_path / "wh", ["t"])
    assert before["t"]["rows"] == after["t"]["rows"] == 3
    assert before["t"]["sha256"] != after["t"]["sha256"]
    # row order on disk is not a change
    frame.reverse().write_parquet(d / "analyze.parquet")
    assert digest_tables(tmp_path / "wh", ["t"]) == before
