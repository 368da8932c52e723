"""The generator's planted truth is recovered: every idle slot, never-used GPU, debugging job and
memory phase, and no other (within one sampling interval at the edges)."""

from __future__ import annotations

import itertools
import json
from datetime import datetime, timedelta
from typing import Any

import polars as pl
import pytest

from gpuwaste import generate
from gpuwaste.analyses.run import analyze
from gpuwaste.config import Settings
from gpuwaste.warehouse.store import Warehouse

INTERVAL = 15


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Warehouse, dict[str, Any]]:
    base = tmp_path_factory.mktemp("gen")
    spec = generate.GeneratorSpec(seed=3, gpus=16, days=1.0, interval_s=INTERVAL, cluster="g")
    generate.write_all(spec, base / "out")
    generate.write_samples_parquet(spec, base / "samples")
    cluster = generate.simulate(spec)
    wh = Warehouse(base / "wh")
    samples = pl.read_parquet(base / "samples" / "*" / "*.parquet")
    start = spec.start
    wh.replace_window("gpu_samples", "g", start, start + timedelta(days=spec.days), samples)
    wh.upsert("jobs", "g", "gen", generate.jobs_frame(cluster))
    wh.upsert("job_gpus", "g", "gen", generate.job_gpus_frame(cluster))
    analyze(Settings(data_dir=base / "wh"), quiet=True)
    truth = json.loads((base / "out" / "truth.json").read_text())
    return wh, truth


def _ts(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _close(a: datetime, b: datetime) -> bool:
    return abs((a - b).total_seconds()) <= INTERVAL


def test_every_idle_slot_and_no_other(planted: tuple[Warehouse, dict[str, Any]]) -> None:
    wh, truth = planted
    found = wh.read("idle_slots", "g")
    expected = truth["idle_slots"]
    assert isinstance(expected, list) and expected
    mine: dict[tuple[str, str, int], list[tuple[datetime, datetime]]] = {}
    for r in found.iter_rows(named=True):
        mine.setdefault((r["job_id"], r["host"], r["gpu"]), []).append((r["start_ts"], r["end_ts"]))
    missing = []
    for s in expected:
        key = (s["job_id"], s["host"], s["gpu"])
        hits = [
            m
            for m in mine.get(key, [])
            if _close(m[0], _ts(s["start"])) and _close(m[1], _ts(s["end"]))
        ]
        if len(hits) != 1:
            missing.append(s)
    assert not missing, missing[:3]
    assert found.height == len(expected)


def test_every_never_used_gpu_and_no_other(planted: tuple[Warehouse, dict[str, Any]]) -> None:
    wh, truth = planted
    rows = wh.read("job_gpu_usage", "g").filter(pl.col("never_used"))
    mine = {(r["job_id"], r["host"], r["gpu"]) for r in rows.iter_rows(named=True)}
    expected = {(n["job_id"], n["host"], n["gpu"]) for n in truth["never_used"]}
    assert expected and mine == expected


def test_debugging_jobs(planted: tuple[Warehouse, dict[str, Any]]) -> None:
    wh, truth = planted
    jobs = wh.read("job_usage", "g")
    declared = set(jobs.filter(pl.col("is_debug_declared"))["job_id"].to_list())
    assert declared == set(truth["debug_jobs"])
    limit = set(
        jobs.filter(pl.col("is_debug_declared") & pl.col("hit_time_limit"))["job_id"].to_list()
    )
    assert limit == set(truth["timeouts"])


def test_memory_phases(planted: tuple[Warehouse, dict[str, Any]]) -> None:
    wh, truth = planted
    phases = wh.read("stable_phases", "g")
    mine: dict[tuple[str, str, int], list[datetime]] = {}
    for r in phases.iter_rows(named=True):
        mine.setdefault((r["job_id"], r["host"], r["gpu"]), []).append(r["start_ts"])
    gap_ends = {(g["host"], g["gpu"]): _ts(g["end"]) for g in truth["gaps"]}
    planted_starts: dict[tuple[str, str, int], list[datetime]] = {}
    for p in truth["phases"]:
        planted_starts.setdefault((p["job_id"], p["host"], p["gpu"]), []).append(_ts(p["start"]))
    for key, starts in planted_starts.items():
        found = mine.get(key, [])
        for s in starts:
            assert any(_close(s, f) for f in found), (key, s)
        for f in found:  # no other phase, except one resuming after a data gap
            g = gap_ends.get((key[1], key[2]))
            assert any(_close(s, f) for s in starts) or (g is not None and _close(g, f)), (key, f)


def test_incremental_equals_rebuild_on_generated_cluster(
    planted: tuple[Warehouse, dict[str, Any]],
) -> None:
    wh, _ = planted
    settings = Settings(data_dir=wh.data_dir)
    names = ("job_gpu_usage", "idle_slots", "stable_phases", "job_usage", "waste_by_vc")
    first = {n: wh.read(n, "g").sort(pl.all()) for n in names}
    assert analyze(settings, quiet=True)[0].jobs_recomputed == 0  # nothing changed
    # rewrite the second day's samples (same rows): only the jobs spanning it are recomputed
    day = sorted((wh.cluster_dir("gpu_samples", "g")).glob("date=*"))[1]
    path = day / "data.parquet"
    path.write_bytes(path.read_bytes())
    run = analyze(settings, quiet=True)[0]
    assert 0 < run.jobs_recomputed < run.jobs_total
    for n in names:
        assert wh.read(n, "g").sort(pl.all()).equals(first[n]), n
    analyze(settings, rebuild=True, quiet=True)
    for n in names:
        assert wh.read(n, "g").sort(pl.all()).equals(first[n]), n


def test_fluctuating_jobs(planted: tuple[Warehouse, dict[str, Any]]) -> None:
    wh, truth = planted
    jobs = wh.read("job_usage", "g")
    mine = set(jobs.filter(pl.col("fluctuating"))["job_id"].to_list())
    expected = {j["job_id"] for j in truth["jobs"] if "fluctuating" in j["planted"]}
    assert expected and mine == expected


def _regular_zero_runs(truth: dict[str, Any], job_id: str) -> bool:
    """From the planted truth alone: does some GPU of the job have >= 3 zero runs, between busy
    stretches, whose start-to-start spacing varies by under 20 % (the definition's choice)?"""
    job = next(j for j in truth["jobs"] if j["job_id"] == job_id)
    runs: dict[tuple[str, int], list[datetime]] = {}
    for kind in ("idle_slots", "short_zero_runs"):
        for r in truth[kind]:
            if r["job_id"] == job_id and r["start"] > job["start"] and r["end"] < job["end"]:
                runs.setdefault((r["host"], r["gpu"]), []).append(_ts(r["start"]))
    for starts in runs.values():
        starts.sort()
        gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(starts)]
        if len(starts) >= 3 and (max(gaps) - min(gaps)) / (sum(gaps) / len(gaps)) < 0.2:
            return True
    return False


def test_checkpointing_jobs(planted: tuple[Warehouse, dict[str, Any]]) -> None:
    wh, truth = planted
    jobs = wh.read("job_usage", "g")
    mine = set(jobs.filter(pl.col("checkpointing"))["job_id"].to_list())
    expected = {j["job_id"] for j in truth["jobs"] if "checkpointing" in j["planted"]}
    assert expected and expected <= mine
    # Any other job flagged must be regular by the definition, judged from what was planted
    # (random short zero runs can fall at a regular period by chance).
    for job_id in mine - expected:
        assert _regular_zero_runs(truth, job_id), job_id


def test_energy_per_job_and_in_idle_slots(planted: tuple[Warehouse, dict[str, Any]]) -> None:
    """The generator's power (generate/power.py) integrated by the analysis equals the planted
    energy, and the planted energy in idle slots, each within 1 % of itself per job x GPU (jobs
    of 200 samples or more: the first sample's part and the end after the last one make up the
    rest) and over the cluster. A slot that runs to the job's end also has that end: up to one
    interval at the planted idle power more than its samples' energy (truth.json's `power`)."""
    wh, truth = planted
    rows = wh.read("job_gpu_usage", "g").select(
        "job_id", "host", "gpu", "energy_kwh", "lost_energy_kwh"
    )
    planted_energy = pl.DataFrame(truth["energy"])
    both = planted_energy.join(rows, on=["job_id", "host", "gpu"], suffix="_found")
    assert both.height == planted_energy.height > 50
    long = both.filter(pl.col("samples") >= 200)
    assert long.height > 20
    (levels,) = truth["power"]["models"].values()
    end_kwh = {"energy_kwh": 0.0, "lost_energy_kwh": levels["idle_w"] * INTERVAL / 3.6e6}
    for col in ("energy_kwh", "lost_energy_kwh"):
        err = (pl.col(f"{col}_found") - pl.col(col)).abs()
        bad = long.filter(err > 0.01 * pl.col(col) + end_kwh[col])
        assert bad.is_empty(), bad.head(3).to_dicts()
        total = both[col].sum()
        assert both[f"{col}_found"].sum() == pytest.approx(total, rel=0.01)
    assert both["lost_energy_kwh"].sum() > 0.05 * both["energy_kwh"].sum()  # slots were planted
