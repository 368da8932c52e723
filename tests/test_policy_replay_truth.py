"""The replay on the generator's planted policy cases (`--policy-cases`): busy-then-idle jobs are
hit and not wrongful; idle-then-busy jobs (idle longer than H, then busy) are wrongful hits.
Every expected figure is computed from truth.json, within one sampling interval per GPU."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from gpuwaste.act.policy.replay import open_warehouse, replay
from gpuwaste.act.policy.rule import make_rule
from gpuwaste.analyses.run import analyze
from gpuwaste.config import Settings
from gpuwaste.generate import (
    GeneratorSpec,
    job_gpus_frame,
    jobs_frame,
    simulate,
    write_all,
    write_samples_parquet,
)
from gpuwaste.generate.policy_cases import BUSY_THEN_IDLE, IDLE_THEN_BUSY
from gpuwaste.warehouse.store import Warehouse

DT = 15
H = 3600
SPEC = GeneratorSpec(seed=3, gpus=24, days=1.5, interval_s=DT, cluster="g", policy_cases=True)


def _ts(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    base = tmp_path_factory.mktemp("policy-gen")
    write_all(SPEC, base / "out")
    write_samples_parquet(SPEC, base / "samples")
    cluster = simulate(SPEC)
    wh = Warehouse(base / "wh")
    samples = pl.read_parquet(base / "samples" / "*" / "*.parquet")
    wh.replace_window(
        "gpu_samples", "g", SPEC.start, SPEC.start + timedelta(days=SPEC.days), samples
    )
    wh.upsert("jobs", "g", "gen", jobs_frame(cluster))
    wh.upsert("job_gpus", "g", "gen", job_gpus_frame(cluster))
    analyze(Settings(data_dir=base / "wh"), quiet=True)
    truth = json.loads((base / "out" / "truth.json").read_text())
    return base / "wh", truth


def _hits(data_dir: Path, *hours: str) -> pl.DataFrame:
    con = open_warehouse(data_dir, "g")
    try:
        return replay(con, make_rule(list(hours)), cluster="g", jobs=True)
    finally:
        con.close()


def _missing_after(truth: dict[str, Any], case: dict[str, Any], after: datetime) -> float:
    """Seconds of missing data on the job's GPUs after `after`, from the planted gaps (a gap of
    samples [a, b) leaves (a - dt, b] without data)."""
    job = next(j for j in truth["jobs"] if j["job_id"] == case["job_id"])
    gpus = {(a["host"], a["gpu"]) for a in job["alloc"]}
    total = 0.0
    for g in truth["gaps"]:
        if (g["host"], g["gpu"]) in gpus:
            start = max(_ts(g["start"]) - timedelta(seconds=DT), after)
            end = min(_ts(g["end"]), _ts(job["end"]))
            total += max(0.0, (end - start).total_seconds())
    return total


def test_the_option_plants_both_kinds(planted: tuple[Path, dict[str, Any]]) -> None:
    _, truth = planted
    kinds = [c["kind"] for c in truth["policy_cases"]]
    assert kinds.count(BUSY_THEN_IDLE) >= 3 and kinds.count(IDLE_THEN_BUSY) >= 3
    for c in truth["policy_cases"]:
        job = next(j for j in truth["jobs"] if j["job_id"] == c["job_id"])
        assert c["kind"] in job["planted"]


def test_busy_then_idle_jobs_are_hit_and_not_wrongful(
    planted: tuple[Path, dict[str, Any]],
) -> None:
    data_dir, truth = planted
    hits = {r["job_id"]: r for r in _hits(data_dir, "1").iter_rows(named=True)}
    cases = [c for c in truth["policy_cases"] if c["kind"] == BUSY_THEN_IDLE]
    for c in cases:
        r = hits[c["job_id"]]
        # the idle slot starts where the last busy sample's time ends: one interval before
        # the first idle sample (`switch`)
        cancel = _ts(c["switch"]) - timedelta(seconds=DT) + timedelta(hours=1)
        assert abs((r["cancel_ts"] - cancel).total_seconds()) <= DT, c
        reclaimed = (_ts(c["end"]) - cancel).total_seconds() * c["gpus"]
        assert r["reclaimed_gpu_h"] * H == pytest.approx(reclaimed, abs=DT * c["gpus"]), c
        assert not r["wrongful"] and r["work_lost_gpu_h"] == 0 and r["work_lost_max_gpu_h"] == 0, c


def test_idle_then_busy_jobs_are_wrongful_hits(planted: tuple[Path, dict[str, Any]]) -> None:
    data_dir, truth = planted
    hits = {r["job_id"]: r for r in _hits(data_dir, "1").iter_rows(named=True)}
    cases = [c for c in truth["policy_cases"] if c["kind"] == IDLE_THEN_BUSY]
    for c in cases:
        r = hits[c["job_id"]]
        cancel = _ts(c["start"]) + timedelta(hours=1)  # idle from its start
        assert abs((r["cancel_ts"] - cancel).total_seconds()) <= DT, c
        end, switch = _ts(c["end"]), _ts(c["switch"])
        assert r["reclaimed_gpu_h"] * H == pytest.approx(
            (end - cancel).total_seconds() * c["gpus"], abs=DT * c["gpus"]
        )
        # busy from the last idle sample's end (switch - dt) to the end, less the planted gaps
        busy = (end - switch).total_seconds() * c["gpus"] - _missing_after(truth, c, switch)
        assert r["wrongful"], c
        assert r["work_lost_gpu_h"] * H == pytest.approx(busy, abs=DT * c["gpus"]), c
        assert r["work_lost_max_gpu_h"] * H == pytest.approx(
            (end - switch).total_seconds() * c["gpus"], abs=DT * c["gpus"]
        )


def test_a_threshold_longer_than_the_idle_part_spares_them(
    planted: tuple[Path, dict[str, Any]],
) -> None:
    data_dir, truth = planted
    longest = {}
    for c in truth["policy_cases"]:
        start, end, switch = _ts(c["start"]), _ts(c["end"]), _ts(c["switch"])
        idle = end - switch if c["kind"] == BUSY_THEN_IDLE else switch - start
        longest[c["job_id"]] = idle.total_seconds()
    h = max(longest.values()) / H + 0.1
    hit = set(_hits(data_dir, f"{h:.3f}")["job_id"].to_list())
    assert not hit & set(longest)
    # at 1.9 h every planted job is still hit (each idle part lasts at least 2 h)
    assert set(longest) <= set(_hits(data_dir, "1.9")["job_id"].to_list())


def test_sweep_totals_equal_the_jobs_hit(planted: tuple[Path, dict[str, Any]]) -> None:
    data_dir, _ = planted
    con = open_warehouse(data_dir, "g")
    try:
        summary = replay(con, make_rule(["1,2,4"]), cluster="g")
        hits = replay(con, make_rule(["1,2,4"]), cluster="g", jobs=True)
    finally:
        con.close()
    total = summary.filter(pl.col("vc") == "(all)")
    per_h = hits.group_by("idle_hours").agg(
        pl.len().alias("jobs_hit"),
        pl.col("wrongful").sum().alias("wrongful_hits"),
        pl.col("reclaimed_gpu_h").sum(),
    )
    for r in total.iter_rows(named=True):
        row = per_h.filter(pl.col("idle_hours") == r["idle_hours"]).row(0, named=True)
        assert (r["jobs_hit"], r["wrongful_hits"]) == (row["jobs_hit"], row["wrongful_hits"])
        assert r["reclaimed_gpu_h"] == pytest.approx(row["reclaimed_gpu_h"])
    vcs = summary.filter(pl.col("vc") != "(all)").group_by("idle_hours").agg(pl.sum("jobs_hit"))
    assert sorted(vcs.rows()) == sorted(total.select("idle_hours", "jobs_hit").rows())
