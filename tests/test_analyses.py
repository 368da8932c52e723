"""Hand-computed cases for each definition, written into a real warehouse and analyzed."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pytest

from gpuwaste.analyses.run import analyze
from gpuwaste.config import Settings, Thresholds
from gpuwaste.warehouse.catalog import connect, refresh_catalog
from gpuwaste.warehouse.store import Warehouse

T0 = datetime(2026, 11, 1, 10, 0, tzinfo=UTC)
MEM_TOTAL = 81920.0


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def series(
    host: str, gpu: int, points: Sequence[tuple[float, float, float]]
) -> list[dict[str, Any]]:
    """Samples (seconds after T0, util, memory MiB) of one GPU."""
    return [
        {
            "host": host,
            "gpu": gpu,
            "ts": at(s),
            "util": u,
            "mem_used_mib": m,
            "mem_total_mib": MEM_TOTAL,
        }
        for s, u, m in points
    ]


def build(
    data_dir: Path,
    samples: list[dict[str, Any]],
    jobs: list[dict[str, Any]],
    *,
    cluster: str = "c",
    windows: list[tuple[datetime, datetime]] | None = None,
) -> Warehouse:
    """Write samples (by windows, as an ingestor would), jobs and allocations."""
    wh = Warehouse(data_dir)
    df = pl.DataFrame(samples).with_columns(pl.col("ts").dt.cast_time_unit("us"))
    lo = df["ts"].min()
    hi = df["ts"].max()
    assert isinstance(lo, datetime) and isinstance(hi, datetime)
    for a, b in windows or [(lo, hi + timedelta(seconds=1))]:
        part = df.filter((pl.col("ts") >= a) & (pl.col("ts") < b))
        wh.replace_window("gpu_samples", cluster, a, b, part)
    job_rows, gpu_rows = [], []
    for j in jobs:
        job_rows.append(
            {
                "job_id": j["job_id"],
                "user": j.get("user", "u1"),
                "vc": j.get("vc", "vc1"),
                "name": "train",
                "state": j.get("state", "passed"),
                "raw_state": j.get("raw_state", "COMPLETED"),
                "submit_ts": j["start"] - timedelta(seconds=30),
                "start_ts": j["start"],
                "end_ts": j["end"],
                "gpus": len(j["gpus"]),
                "is_debug": j.get("is_debug", False),
                "source": "test",
            }
        )
        for host, gpu in j["gpus"]:
            gpu_rows.append(
                {
                    "job_id": j["job_id"],
                    "attempt": 0,
                    "host": host,
                    "gpu": gpu,
                    "start_ts": j["start"],
                    "end_ts": j["end"],
                }
            )
    wh.upsert("jobs", cluster, "test", pl.DataFrame(job_rows))
    wh.upsert("job_gpus", cluster, "test", pl.DataFrame(gpu_rows))
    return wh


def run(data_dir: Path, **thresholds: float) -> Warehouse:
    t = Thresholds.model_validate(thresholds)
    analyze(Settings(data_dir=data_dir, thresholds=t), quiet=True)
    return Warehouse(data_dir)


def gpu_row(wh: Warehouse, job: str, gpu: int = 0) -> dict[str, Any]:
    df = wh.read("job_gpu_usage", "c").filter((pl.col("job_id") == job) & (pl.col("gpu") == gpu))
    assert df.height == 1
    return df.row(0, named=True)


def regular(
    n: int, step: float, value: tuple[float, float] = (50.0, 1000.0)
) -> list[tuple[float, float, float]]:
    return [(step * (k + 1), *value) for k in range(n)]


def test_irregular_sampling_is_time_weighted(data_dir: Path) -> None:
    # samples stand for (t_(j-1), t_j], the last one also for the tail to the job's end:
    # 10 s at 100 %, 30 s at 0 % (memory held), 15 s + 5 s tail at 40 %
    pts = [(10, 100, 500), (40, 0, 500), (55, 40, 500)]
    build(
        data_dir,
        series("h", 0, pts),
        [{"job_id": "j", "start": at(0), "end": at(60), "gpus": [("h", 0)]}],
    )
    wh = run(data_dir, sampling_interval_s=15)
    r = gpu_row(wh, "j")
    assert r["alloc_s"] == 60 and r["observed_s"] == 60 and r["missing_s"] == 0
    assert r["util_mean"] == pytest.approx((100 * 10 + 0 * 30 + 40 * 20) / 60)
    assert r["util_max"] == 100


@pytest.mark.parametrize(("run_s", "slots"), [(59, 0), (61, 1)])
def test_zero_run_of_59_vs_61_seconds(data_dir: Path, run_s: int, slots: int) -> None:
    # busy samples every second, with a zero run standing for run_s seconds in the middle
    pts = [(s, 50, 1000) for s in range(1, 101)]
    pts += [(100 + s, 0, 0) for s in range(1, run_s + 1)]
    pts += [(100 + run_s + s, 50, 1000) for s in range(1, 101)]
    end = 200 + run_s
    build(
        data_dir,
        series("h", 0, pts),
        [{"job_id": "j", "start": at(0), "end": at(end), "gpus": [("h", 0)]}],
    )
    wh = run(data_dir)
    r = gpu_row(wh, "j")
    assert r["idle_slots"] == slots
    assert r["idle_slot_s"] == (run_s if slots else 0)
    assert r["busy_s"] == end - r["idle_slot_s"]
    assert not r["never_used"]


def test_zero_utilization_with_memory_held_is_not_idle(data_dir: Path) -> None:
    pts = [(15 * k, 0, 2048) for k in range(1, 41)]
    build(
        data_dir,
        series("h", 0, pts),
        [{"job_id": "j", "start": at(0), "end": at(600), "gpus": [("h", 0)]}],
    )
    wh = run(data_dir)
    r = gpu_row(wh, "j")
    assert r["idle_slots"] == 0 and r["idle_slot_s"] == 0 and not r["never_used"]
    assert r["busy_s"] == 600


def test_memory_floor_is_a_parameter(data_dir: Path) -> None:
    pts = [(15 * k, 0, 3) for k in range(1, 41)]
    build(
        data_dir,
        series("h", 0, pts),
        [{"job_id": "j", "start": at(0), "end": at(600), "gpus": [("h", 0)]}],
    )
    assert not gpu_row(run(data_dir), "j")["never_used"]
    assert gpu_row(run(data_dir, idle_mem_floor_mib=4), "j")["never_used"]


def test_all_zero_gpu_is_never_used_not_idle(data_dir: Path) -> None:
    busy = [(15 * k, 60, 4000) for k in range(1, 41)]
    zero = [(15 * k, 0, 0) for k in range(1, 41)]
    build(
        data_dir,
        series("h", 0, busy) + series("h", 1, zero),
        [{"job_id": "j", "start": at(0), "end": at(600), "gpus": [("h", 0), ("h", 1)]}],
    )
    wh = run(data_dir)
    r = gpu_row(wh, "j", 1)
    assert r["never_used"] and r["never_used_s"] == 600
    assert r["idle_slot_s"] == 0 and r["idle_slots"] == 0
    assert wh.read("idle_slots", "c").height == 0
    job = wh.read("job_usage", "c").row(0, named=True)
    assert job["never_used_gpus"] == 1 and job["never_used_gpu_s"] == 600
    assert "gpu_oversubscription" in job["diagnoses"] or job["util_mean"] > 50


def test_gap_is_no_data_not_idle(data_dir: Path) -> None:
    # 15 s samples with zeros, and a 300 s hole in the middle: the hole is missing, and it splits
    # the zero run into two slots of 150 s
    pts = [(15 * k, 0, 0) for k in range(1, 11)] + [(450 + 15 * k, 0, 0) for k in range(0, 11)]
    pts += [(15 * k, 80, 900) for k in range(41, 45)]
    build(
        data_dir,
        series("h", 0, pts),
        [{"job_id": "j", "start": at(0), "end": at(660), "gpus": [("h", 0)]}],
    )
    wh = run(data_dir)
    r = gpu_row(wh, "j")
    assert r["missing_s"] == 300
    assert r["idle_slots"] == 2 and r["idle_slot_s"] == 150 + 150
    assert r["idle_slot_s"] + r["never_used_s"] + r["busy_s"] + r["missing_s"] == r["alloc_s"]


def test_too_little_data_is_flagged_not_judged(data_dir: Path) -> None:
    pts = [(15 * k, 0, 0) for k in range(1, 5)]
    build(
        data_dir,
        series("h", 0, pts),
        [{"job_id": "j", "start": at(0), "end": at(3600), "gpus": [("h", 0)]}],
    )
    wh = run(data_dir)
    job = wh.read("job_usage", "c").row(0, named=True)
    assert job["low_data"] and job["diagnoses"] == ""
    assert job["observed_share"] == pytest.approx(60 / 3600, abs=1e-6)  # stored to 6 decimals


def test_phase_boundary(data_dir: Path) -> None:
    # 10 min at ~1000 MiB (small noise stays in the phase), then 10 min at 9000 MiB
    pts = [(15 * k, 70, 1000 + (k % 3) * 100) for k in range(1, 41)]
    pts += [(600 + 15 * k, 70, 9000) for k in range(1, 41)]
    build(
        data_dir,
        series("h", 0, pts),
        [{"job_id": "j", "start": at(0), "end": at(1200), "gpus": [("h", 0)]}],
    )
    wh = run(data_dir)
    phases = wh.read("stable_phases", "c").sort("start_ts")
    assert phases.height == 2
    assert phases["start_ts"].to_list() == [at(0), at(600)]
    assert phases["duration_s"].to_list() == [600, 600]
    assert phases["mem_max_mib"].to_list() == [1200, 9000]
    assert phases["stable"].to_list() == [True, True]
    grid = wh.read("stable_phase_grid", "c").filter(
        (pl.col("vc") == "(all)")
        & (pl.col("gpu_model") == "(all)")
        & (pl.col("t_s") == 960)
        & (pl.col("m_gib") == 8)
    )
    assert grid["pct"][0] == 0  # no phase longer than 960 s
    grid = wh.read("stable_phase_grid", "c").filter(
        (pl.col("vc") == "(all)")
        & (pl.col("gpu_model") == "(all)")
        & (pl.col("t_s") == 480)
        & (pl.col("m_gib") == 8)
    )
    assert grid["pct"][0] == pytest.approx(100.0)  # both phases leave > 8 GiB idle
    job = wh.read("job_usage", "c").row(0, named=True)
    assert job["n_stable_phases"] == 2
    assert job["phase_level_spread_mib"] > 7000


def test_job_across_midnight_and_partitions(data_dir: Path) -> None:
    midnight = datetime(2026, 11, 2, 0, 0, tzinfo=UTC)
    start = midnight - timedelta(minutes=10)
    offset = (start - T0).total_seconds()
    pts = [(offset + 15 * k, 50, 1000) for k in range(1, 21)]
    pts += [(offset + 300 + 15 * k, 0, 0) for k in range(1, 21)]  # 300 s idle over midnight
    pts += [(offset + 600 + 15 * k, 50, 1000) for k in range(1, 21)]
    build(
        data_dir,
        series("h", 0, pts),
        [
            {
                "job_id": "j",
                "start": start,
                "end": start + timedelta(seconds=900),
                "gpus": [("h", 0)],
            }
        ],
    )
    assert len(list((data_dir / "parquet/gpu_samples/cluster=c").glob("date=*"))) == 2
    wh = run(data_dir)
    slots = wh.read("idle_slots", "c")
    assert slots.height == 1
    assert slots["start_ts"][0] == start + timedelta(seconds=300)
    assert slots["duration_s"][0] == 300
    assert gpu_row(wh, "j")["observed_s"] == 900
    daily = (
        wh.read("waste_daily", "c")
        .filter((pl.col("vc") == "(all)") & (pl.col("gpu_model") == "(all)"))
        .sort("day")
    )
    assert daily["alloc_gpu_h"].to_list() == pytest.approx([600 / 3600, 300 / 3600], abs=1e-6)
    parts = ["busy_gpu_h", "idle_slot_gpu_h", "never_used_gpu_h", "missing_gpu_h"]
    assert daily.select(pl.sum_horizontal(parts).alias("s"))["s"].to_list() == pytest.approx(
        daily["alloc_gpu_h"].to_list(), abs=1e-5
    )


def test_debugging_declared_and_inferred_kept_apart(data_dir: Path) -> None:
    # j1 declared debugging; j2 not declared but idle > 50 % in 3 slots
    busy = [(15 * k, 50, 1000) for k in range(1, 241)]
    bursty: list[tuple[float, float, float]] = []
    for k in range(1, 241):
        bursty.append((15 * k, 0 if (k // 20) % 3 != 2 else 50, 0 if (k // 20) % 3 != 2 else 100))
    build(
        data_dir,
        series("h", 0, busy) + series("h", 1, bursty),
        [
            {"job_id": "j1", "start": at(0), "end": at(3600), "gpus": [("h", 0)], "is_debug": True},
            {"job_id": "j2", "start": at(0), "end": at(3600), "gpus": [("h", 1)]},
        ],
    )
    wh = run(data_dir)
    jobs = {r["job_id"]: r for r in wh.read("job_usage", "c").iter_rows(named=True)}
    assert jobs["j1"]["is_debug_declared"] and not jobs["j1"]["is_debug_inferred"]
    assert jobs["j2"]["is_debug_inferred"] and not jobs["j2"]["is_debug_declared"]
    kinds = wh.read("waste_by_vc", "c").filter(
        (pl.col("vc") == "(all)") & (pl.col("gpu_model") == "(all)")
    )
    by_kind = {r["kind"]: r for r in kinds.iter_rows(named=True)}
    assert by_kind["debugging"]["jobs"] == 1 and by_kind["inferred_debugging"]["jobs"] == 1
    assert by_kind["total"]["gpu_s"] == 7200
    own = by_kind["inferred_debugging"]
    assert own["idle_slot_pct_own"] == pytest.approx(100 * own["idle_slot_gpu_s"] / 3600)
    assert own["idle_slot_pct_all"] == pytest.approx(100 * own["idle_slot_gpu_s"] / 7200)
    debug = wh.read("debug_jobs", "c").filter(
        (pl.col("vc") == "(all)") & (pl.col("gpu_model") == "(all)")
    )
    assert sorted(debug["kind"].to_list()) == ["any", "declared", "inferred"]


def test_running_job_is_analyzed_up_to_the_watermark(data_dir: Path) -> None:
    pts = [(15 * k, 50, 1000) for k in range(1, 41)]
    build(
        data_dir,
        series("h", 0, pts),
        [{"job_id": "j", "start": at(0), "end": None, "gpus": [("h", 0)], "state": "running"}],
    )
    from gpuwaste.warehouse.bookkeeping import set_watermark

    set_watermark(Warehouse(data_dir), "c", "prometheus", at(600))
    wh = run(data_dir)
    job = wh.read("job_usage", "c").row(0, named=True)
    assert job["running"] and job["duration_s"] == 600
    assert gpu_row(wh, "j")["alloc_s"] == 600


def test_a_running_job_ends_at_its_own_hosts_newest_sample(data_dir: Path) -> None:
    """Host h reports up to the watermark (600 s), host g only up to 300 s: g's running job
    ends at 300 s + one sampling interval (330 s, the 30 s fallback), h's at the watermark; a
    finished job on g is not bounded."""
    pts = [(15 * k, 50, 1000) for k in range(1, 41)]
    build(
        data_dir,
        series("h", 0, pts) + series("g", 0, pts[:20]),
        [
            {"job_id": "a", "start": at(0), "end": None, "gpus": [("h", 0)], "state": "running"},
            {"job_id": "b", "start": at(0), "end": None, "gpus": [("g", 0)], "state": "running"},
            {"job_id": "c", "start": at(230), "end": at(430), "gpus": [("g", 1)]},
        ],
    )
    from gpuwaste.warehouse.bookkeeping import set_watermark

    set_watermark(Warehouse(data_dir), "c", "prometheus", at(600))
    wh = run(data_dir)
    assert gpu_row(wh, "a")["alloc_s"] == 600
    assert gpu_row(wh, "b")["alloc_s"] == 330
    assert gpu_row(wh, "c", gpu=1)["alloc_s"] == 200


def test_rerun_changes_nothing_and_rebuild_is_identical(data_dir: Path) -> None:
    pts = [(15 * k, 0 if 10 < k < 20 else 50, 0 if 10 < k < 20 else 900) for k in range(1, 41)]
    build(
        data_dir,
        series("h", 0, pts),
        [{"job_id": "j", "start": at(0), "end": at(600), "gpus": [("h", 0)]}],
    )
    settings = Settings(data_dir=data_dir)
    first = analyze(settings, quiet=True)[0]
    assert first.jobs_recomputed == 1
    wh = Warehouse(data_dir)
    before = {
        n: wh.read(n, "c") for n in ("job_gpu_usage", "idle_slots", "waste_by_vc", "job_usage")
    }
    again = analyze(settings, quiet=True)[0]
    assert again.jobs_recomputed == 0
    rebuilt = analyze(settings, rebuild=True, quiet=True)[0]
    assert rebuilt.rebuilt and rebuilt.jobs_recomputed == 1
    for name, df in before.items():
        assert wh.read(name, "c").equals(df), name


def test_results_of_an_older_version_are_read_then_rebuilt(data_dir: Path) -> None:
    """A result column added by a newer gpuwaste (job_usage.checkpointing) is absent from files
    an older one wrote: the views read it as NULL instead of failing to bind, and the next
    analyze recomputes every job because the result tables changed."""
    pts = [(15 * k, 50, 900) for k in range(1, 41)]
    build(
        data_dir,
        series("h", 0, pts),
        [{"job_id": "j", "start": at(0), "end": at(600), "gpus": [("h", 0)]}],
    )
    settings = Settings(data_dir=data_dir)
    analyze(settings, quiet=True)
    path = data_dir / "parquet" / "job_usage" / "cluster=c" / "analyze.parquet"
    assert path.is_file()
    pl.read_parquet(path).drop("checkpointing").write_parquet(path)  # as the older version
    meta = data_dir / "analyze_state" / "c.json"
    old_state = json.loads(meta.read_text())
    del old_state["results_schema"]
    meta.write_text(json.dumps(old_state))
    con = connect(data_dir)
    assert con.sql("select job_id, checkpointing from job_usage").fetchall() == [("j", None)]
    con.close()
    refresh_catalog(data_dir)
    cat = duckdb.connect(str(data_dir / "gpuwaste.duckdb"), read_only=True)
    assert cat.sql("select checkpointing from job_usage").fetchall() == [(None,)]
    cat.close()
    again = analyze(settings, quiet=True)[0]
    assert again.rebuilt and again.jobs_recomputed == 1
    assert pl.read_parquet(path)["checkpointing"].to_list() == [False]
    cat = duckdb.connect(str(data_dir / "gpuwaste.duckdb"), read_only=True)
    assert cat.sql("select checkpointing from job_usage").fetchall() == [(False,)]
    cat.close()
    assert analyze(settings, quiet=True)[0].jobs_recomputed == 0


def test_incremental_recomputes_only_changed_jobs(data_dir: Path) -> None:
    day2 = 86400.0
    pts = [(15 * k, 50, 900) for k in range(1, 41)] + [
        (day2 + 15 * k, 50, 900) for k in range(1, 41)
    ]
    build(
        data_dir,
        series("h", 0, pts),
        [
            {"job_id": "a", "start": at(0), "end": at(600), "gpus": [("h", 0)]},
            {"job_id": "b", "start": at(day2), "end": at(day2 + 600), "gpus": [("h", 0)]},
        ],
    )
    settings = Settings(data_dir=data_dir)
    analyze(settings, quiet=True)
    wh = Warehouse(data_dir)
    # new samples for day 2 only: job b goes idle in its second half
    new = series(
        "h", 0, [(day2 + 15 * k, 50 if k <= 20 else 0, 900 if k <= 20 else 0) for k in range(1, 41)]
    )
    wh.replace_window(
        "gpu_samples",
        "c",
        at(day2),
        at(day2 + 601),
        pl.DataFrame(new).with_columns(pl.col("ts").dt.cast_time_unit("us")),
    )
    again = analyze(settings, quiet=True)[0]
    assert again.jobs_recomputed == 1
    incremental = {
        n: wh.read(n, "c").sort(pl.all())
        for n in ("job_gpu_usage", "idle_slots", "job_usage", "waste_by_vc")
    }
    assert gpu_row(wh, "b")["idle_slot_s"] == 300
    analyze(settings, rebuild=True, quiet=True)
    for name, df in incremental.items():
        assert wh.read(name, "c").sort(pl.all()).equals(df), name
    # --since: every job still running on or after that day is recomputed, and only those
    assert analyze(settings, since=at(day2).date(), quiet=True)[0].jobs_recomputed == 1
    assert analyze(settings, quiet=True)[0].jobs_recomputed == 0


def test_unknown_gpu_index_is_attributed_by_job_label(data_dir: Path) -> None:
    pts = series("h", 3, [(15 * k, 40, 900) for k in range(1, 41)])
    for p in pts:
        p["job_id"] = "j"
    other = series("h", 4, [(15 * k, 0, 0) for k in range(1, 41)])
    build(
        data_dir,
        pts + other,
        [{"job_id": "j", "start": at(0), "end": at(600), "gpus": [("h", -1)]}],
    )
    wh = run(data_dir)
    rows = wh.read("job_gpu_usage", "c")
    assert rows["gpu"].to_list() == [3]
    assert rows["util_mean"][0] == pytest.approx(40)


def test_jobs_sharing_a_gpu_each_see_its_samples(data_dir: Path) -> None:
    # job a holds GPU 0 for [0, 600), job b shares it for [300, 900); a third job c follows
    pts = [(15 * k, 30, 1000) for k in range(1, 80)]
    build(
        data_dir,
        series("h", 0, pts),
        [
            {"job_id": "a", "start": at(0), "end": at(600), "gpus": [("h", 0)]},
            {"job_id": "b", "start": at(300), "end": at(900), "gpus": [("h", 0)]},
            {"job_id": "c", "start": at(900), "end": at(1200), "gpus": [("h", 0)]},
        ],
    )
    wh = run(data_dir)
    # each sees its 600 s of samples; over [300, 600) the two share the GPU, so each holds
    # 300 + 150 = 450 GPU seconds: its device share is 0.75 (docs/analyses.md#shared-gpus)
    for job in ("a", "b"):
        assert gpu_row(wh, job)["observed_s"] == pytest.approx(450), job
        assert gpu_row(wh, job)["gpu_weight"] == pytest.approx(0.75), job
    assert gpu_row(wh, "c")["observed_s"] == 300  # last sample at 1185 s holds the 15 s tail


def _dipping(
    dip_starts: list[int], end: int, busy: float = 30.0
) -> list[tuple[float, float, float]]:
    """A GPU busy at `busy` % every 15 s, dropping to 0 (memory held) for 60 s at each dip."""
    zero = {t + k for t in dip_starts for k in range(0, 60, 15)}
    return [(float(t), 0.0 if t in zero else busy, 4096.0) for t in range(15, end, 15)]


@pytest.mark.parametrize(
    ("dips", "expected"),
    [
        ([300, 600, 900], True),  # spacing 300, 300: regular
        ([300, 615, 900], True),  # 315, 285: spread 30/300 = 10 % < 20 %
        ([300, 450, 900], False),  # 150, 450: irregular
        ([300, 600], False),  # two dips are not a period
    ],
)
def test_synchronous_checkpointing(data_dir: Path, dips: list[int], expected: bool) -> None:
    """ICSE24 Table 1: utilization drops to idle at a regular period (>= 3 dips, spacing within
    20 %). The idle final stretch (t >= 1200) is unreleased time, not a dip."""
    pts = _dipping(dips, 1200) + [(float(t), 0.0, 4096.0) for t in range(1200, 1500, 15)]
    build(
        data_dir,
        series("h", 0, pts),
        [{"job_id": "j", "start": at(0), "end": at(1500), "gpus": [("h", 0)]}],
    )
    job = run(data_dir).read("job_usage", "c").row(0, named=True)
    assert job["checkpointing"] is expected
    assert ("synchronous_checkpointing" in job["diagnoses"].split(",")) is expected
