"""Idle held versus empty (#44): **held** idle is a stretch longer than `idle_slot_min_s` of
utilization 0 with memory above `idle_mem_floor_mib` (memory held, no kernel), **empty** idle the
idle-slot time (memory at or under the floor); job_gpu_usage's `idle_held_s` and
`idle_empty_s`, and `held_idle_energy_kwh` beside `lost_energy_kwh`. Hand-built samples through
a real `analyze` (rows written as ingest writes them), then a generated cluster (generate ->
ingest -> analyze) against the generator's planted held power and against the definition
computed from the samples in SQL.
"""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import polars as pl
import pytest
from streamlit.testing.v1 import AppTest

from gpuwaste.analyses.run import analyze
from gpuwaste.analyses.waste_by import waste_by
from gpuwaste.config import DATA_DIR_ENV, Settings, Thresholds
from gpuwaste.generate.power import HELD_W
from gpuwaste.warehouse.store import Warehouse
from tests.test_dashboard_app import APP, TIMEOUT, _open

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
STEP_S = 10
BUSY, HELD, EMPTY = (50.0, 4096.0, 600.0), (0.0, 4096.0, 210.0), (0.0, 0.0, 70.0)
# sample k (0..59, at T0 + 10 (k + 1) s) stands for the 10 s before it: (util, memory MiB,
# power W); the job ends 10 s after the last one, which stands for that tail too
PLAN = (
    [BUSY] * 6  # 0-60 s
    + [HELD] * 18  # 60-240 s: 3 min at 0 % holding 4 GiB -> 180 s held
    + [BUSY] * 6  # 240-300 s
    + [HELD] * 5  # 300-350 s: 50 s, not longer than 60 s -> not held (busy, as for the studies)
    + [BUSY] * 5  # 350-400 s
    + [HELD] * 9  # 400-490 s: 90 s held ...
    + [EMPTY] * 9  # 490-580 s: ... then memory released: a 90 s idle slot (empty)
    + [BUSY] * 2  # 580-600 s, and the tail to 610 s
)


def _analyzed(data_dir: Path, thresholds: Thresholds) -> pl.DataFrame:
    end = T0 + timedelta(seconds=STEP_S * (len(PLAN) + 1))
    rows = [
        {"host": "h1", "gpu": 0, "gpu_model": "NVIDIA H100 80GB HBM3",
         "ts": T0 + timedelta(seconds=STEP_S * (k + 1)), "util": util,
         "util_source": "DCGM_FI_DEV_GPU_UTIL", "gpu_util": util, "power_w": watts,
         "mem_used_mib": mem, "mem_total_mib": 81920.0, "job_id": "j"}
        for k, (util, mem, watts) in enumerate(PLAN)
    ]  # fmt: skip
    wh = Warehouse(data_dir)
    wh.replace_window("gpu_samples", "c", T0, end, pl.DataFrame(rows, infer_schema_length=None))
    wh.upsert("jobs", "c", "t", pl.DataFrame({
        "job_id": ["j"], "user": ["u"], "vc": ["v"], "state": ["passed"], "start_ts": [T0],
        "end_ts": [end], "gpus": [1],
    }))  # fmt: skip
    wh.upsert("job_gpus", "c", "t", pl.DataFrame({
        "job_id": ["j"], "attempt": [0], "host": ["h1"], "gpu": [0], "gpu_instance": [None],
        "mig_profile": [None], "start_ts": [T0], "end_ts": [end],
    }))  # fmt: skip
    analyze(Settings(data_dir=data_dir, thresholds=thresholds), quiet=True)
    return wh.read("job_gpu_usage", "c")


@pytest.fixture(scope="module")
def hand(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return _analyzed(tmp_path_factory.mktemp("held") / "data", Thresholds()).row(0, named=True)


def test_held_stretches_hand_computed(hand: dict) -> None:
    """180 s + 90 s held (the 50 s stretch is too short), 90 s empty; the studies' figures are
    as without the split: the held time is busy time."""
    assert hand["idle_held_s"] == pytest.approx(180.0 + 90.0)
    assert hand["idle_empty_s"] == pytest.approx(90.0) == hand["idle_slot_s"]
    assert hand["idle_slots"] == 1
    assert hand["busy_s"] == pytest.approx(610.0 - 90.0)
    # held + empty = the time at 0 % in stretches over 60 s: 180 + 90 + 90
    assert hand["idle_held_s"] + hand["idle_empty_s"] == pytest.approx(360.0)


def test_held_idle_energy_hand_computed(hand: dict) -> None:
    """Held: 270 s at 210 W; lost (the idle slot): 90 s at 70 W, the held energy not in it;
    all: 200 s busy at 600 W + 50 s short stretch and 270 s held at 210 W + 90 s at 70 W."""
    assert hand["held_idle_energy_kwh"] == pytest.approx(270 * 210 / 3.6e6)
    assert hand["lost_energy_kwh"] == pytest.approx(90 * 70 / 3.6e6)
    assert hand["energy_kwh"] == pytest.approx((200 * 600 + 320 * 210 + 90 * 70) / 3.6e6)


def test_a_raised_floor_makes_the_held_stretches_idle_slots(tmp_path: Path) -> None:
    """With the floor at 5000 MiB the 4 GiB samples are idle (CloudBrain's rule with the
    operator's floor): 180 s and 90 + 90 s slots, the 50 s one too short, and nothing held."""
    row = _analyzed(tmp_path / "data", Thresholds(idle_mem_floor_mib=5000.0)).row(0, named=True)
    assert row["idle_slot_s"] == pytest.approx(180.0 + 180.0) == row["idle_empty_s"]
    assert row["idle_held_s"] == 0.0 and row["held_idle_energy_kwh"] == 0.0
    assert row["idle_slots"] == 2


def test_held_idle_is_null_where_memory_is_never_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Job j on GPU 0 (PLAN, memory read) and GPU 1 (PLAN's utilization and power, no memory
    reading, as in the Philly trace); user w's job k on GPU 2, no memory reading either. Held
    idle is not measured without memory: null on GPU 1 and 2 (not 0), with their held-idle
    energy; j's sum is GPU 0's 270 s, k's null; `report --by user` null for w, not 0."""
    end = T0 + timedelta(seconds=STEP_S * (len(PLAN) + 1))
    rows = [
        {"host": "h1", "gpu": gpu, "ts": T0 + timedelta(seconds=STEP_S * (k + 1)), "util": util,
         "power_w": watts, "mem_used_mib": mem if gpu == 0 else None,
         "mem_total_mib": 81920.0 if gpu == 0 else None}
        for gpu in (0, 1, 2)
        for k, (util, mem, watts) in enumerate(PLAN)
    ]  # fmt: skip
    wh = Warehouse(tmp_path)
    wh.replace_window("gpu_samples", "c", T0, end, pl.DataFrame(rows, infer_schema_length=None))
    wh.upsert("jobs", "c", "t", pl.DataFrame({
        "job_id": ["j", "k"], "user": ["u", "w"], "vc": ["v", "v"], "state": ["passed"] * 2,
        "start_ts": [T0] * 2, "end_ts": [end] * 2, "gpus": [2, 1],
    }))  # fmt: skip
    wh.upsert("job_gpus", "c", "t", pl.DataFrame({
        "job_id": ["j", "j", "k"], "attempt": [0] * 3, "host": ["h1"] * 3, "gpu": [0, 1, 2],
        "start_ts": [T0] * 3, "end_ts": [end] * 3,
    }))  # fmt: skip
    analyze(Settings(data_dir=tmp_path), quiet=True)
    gpus = wh.read("job_gpu_usage", "c").sort("gpu")
    assert gpus["idle_held_s"].to_list() == [pytest.approx(270.0), None, None]
    assert gpus["held_idle_energy_kwh"].to_list() == [pytest.approx(270 * 210 / 3.6e6), None, None]
    assert gpus["energy_kwh"].null_count() == 0  # power was read: energy is measured
    jobs = dict(wh.read("job_usage", "c").select("job_id", "idle_held_gpu_s").iter_rows())
    assert jobs == {"j": pytest.approx(270.0), "k": None}
    by_user = waste_by(Settings(data_dir=tmp_path), "user").select("user", "idle_held_gpu_h")
    assert dict(by_user.iter_rows()) == {"u": pytest.approx(270 / 3600), "w": None}
    # the Waste page: w's jobs say held idle is not measured; u's give the held hours
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    for user, says in (("w", "is not measured"), ("u", "for 0.1 held-idle GPU h")):
        at = _open(AppTest.from_file(APP, default_timeout=TIMEOUT), "waste", user=user)
        split = [c.value for c in at.caption if "Idle held versus empty" in c.value]
        assert len(split) == 1 and says in split[0], (user, split)


# --------------------------------------------------------------------- a generated cluster
def _gpuwaste(*args: str) -> None:
    exe = Path(sys.executable).parent / "gpuwaste"
    done = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Warehouse:
    base = tmp_path_factory.mktemp("idle-held")
    src, data = base / "src", base / "data"
    _gpuwaste("generate", "--out", str(src), "--seed", "11", "--gpus", "8", "--days", "1",
              "--cluster", "gen")  # fmt: skip
    config = base / "gpuwaste.toml"
    config.write_text(
        f'data_dir = "{data}"\n\n[[clusters]]\nname = "gen"\n\n'
        f'[clusters.openmetrics]\nfile = "{src / "metrics.om"}"\n\n'
        f'[clusters.slurm]\nfile = "{src / "sacct.txt"}"\n'
    )
    _gpuwaste("ingest", "--config", str(config), "--quiet")
    _gpuwaste("analyze", "--config", str(config), "--quiet")
    return Warehouse(data)


# The definition from the samples, apart from the code under test: per allocation (as
# job_gpu_usage bounds it), each
# sample stands for the seconds since the one before (the allocation's start for the first),
# a spacing over 3 intervals (the median spacing) being missing data; the last one also for the
# rest of the allocation. Runs of the same kind (busy, held: 0 % with memory, empty: 0 %
# without) with no missing data inside, longer than 60 s; empty runs of never-used GPUs are
# their never-used time, not idle slots.
DEFINITION = """
with s as (
    select a.job_id, a.attempt, a.host, a.gpu, a.end_ts, x.ts,
           case when x.util > 0 then 'busy' when coalesce(x.mem_used_mib, 0) > 0 then 'held'
                else 'empty' end as kind,
           epoch(x.ts - coalesce(lag(x.ts) over w, a.start_ts)) as dt,
           epoch(lead(x.ts) over w - x.ts) as next_dt
    from allocations as a
    join gpu_samples as x on x.host = a.host and x.gpu = a.gpu
     and x.ts >= a.start_ts and x.ts < a.end_ts and x.util is not null
    window w as (partition by a.job_id, a.attempt, a.host, a.gpu order by x.ts)
),
limits as (
    select *, 3 * median(dt) filter (where dt > 0)
                  over (partition by job_id, attempt, host, gpu) as lim
    from s
),
marked as (
    select *,
        case when dt <= lim then dt else 0 end
            + case when next_dt is null and epoch(end_ts - ts) <= lim
                   then epoch(end_ts - ts) else 0 end as secs,
        coalesce(lag(kind) over w <> kind, true) or dt > lim as opens
    from limits
    window w as (partition by job_id, attempt, host, gpu order by ts)
),
runs as (
    select *, sum(opens::int) over (partition by job_id, attempt, host, gpu order by ts) as run
    from marked
),
per_run as (
    select job_id, attempt, host, gpu, run, any_value(kind) as kind, sum(secs) as secs
    from runs group by all
)
select job_id, attempt, host, gpu,
       coalesce(sum(secs) filter (where kind = 'held' and secs > 60), 0) as held_s,
       coalesce(sum(secs) filter (where kind = 'empty' and secs > 60), 0) as empty_s
from per_run group by all
"""


def test_generated_held_and_empty_are_the_zero_utilization_stretches(
    generated: Warehouse,
) -> None:
    """Held + empty add up to the time at 0 % in stretches over 60 s, by the definition
    computed from the samples (empty on never-used GPUs is their never-used time)."""
    gpus = generated.read("job_gpu_usage", "gen")
    assert gpus["idle_held_s"].sum() > 0 and gpus["idle_empty_s"].sum() > 0
    assert (gpus["idle_empty_s"] == gpus["idle_slot_s"]).all()
    con = duckdb.connect()
    con.register("allocations", gpus)  # as analyzed (a running job's end bounded)
    con.register("gpu_samples", generated.read("gpu_samples", "gen"))
    want = con.sql(DEFINITION).pl()
    got = gpus.join(want, on=["job_id", "attempt", "host", "gpu"], how="left").with_columns(
        pl.col("held_s", "empty_s").fill_null(0.0)
    )
    assert got["idle_held_s"].to_list() == pytest.approx(got["held_s"].to_list(), abs=1e-6)
    used = got.filter(~pl.col("never_used"))
    assert used["idle_empty_s"].to_list() == pytest.approx(used["empty_s"].to_list(), abs=1e-6)
    # held + empty = the time at 0 % in stretches over 60 s, GPU by GPU
    zero = (used["held_s"] + used["empty_s"]).to_list()
    assert (used["idle_held_s"] + used["idle_empty_s"]).to_list() == pytest.approx(zero, abs=1e-6)


def test_generated_held_energy_is_the_planted_held_power(generated: Warehouse) -> None:
    """The generator plants `HELD_W` (210 W) on every sample at 0 % holding memory: each GPU's
    held-idle energy is its held seconds at 210 W, and not part of the lost energy."""
    gpus = generated.read("job_gpu_usage", "gen").filter(pl.col("idle_held_s") > 0)
    assert gpus.height > 0 and gpus["held_idle_energy_kwh"].null_count() == 0
    want = (gpus["idle_held_s"] * HELD_W / 3.6e6).to_list()
    assert gpus["held_idle_energy_kwh"].to_list() == pytest.approx(want, rel=1e-9)
    jobs = generated.read("job_usage", "gen")
    assert jobs["held_idle_energy_kwh"].sum() == pytest.approx(
        generated.read("job_gpu_usage", "gen")["held_idle_energy_kwh"].sum()
    )


def test_report_by_user_shows_the_held_idle_hours_and_energy(generated: Warehouse) -> None:
    """`report --by user`'s rows add up to the GPUs' held-idle hours and energy (no period:
    each allocation counts whole)."""
    df = waste_by(Settings(data_dir=generated.data_dir), "user", cluster="gen")
    gpus = generated.read("job_gpu_usage", "gen")
    assert df["idle_held_gpu_h"].sum() == pytest.approx(gpus["idle_held_s"].sum() / 3600)
    assert df["held_idle_energy_kwh"].sum() == pytest.approx(gpus["held_idle_energy_kwh"].sum())
