"""Properties: every allocated second is accounted for once; how samples were written (in which
windows, split across which partition files) does not change any result."""

from __future__ import annotations

import itertools
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuwaste.analyses.run import analyze
from gpuwaste.config import Settings
from gpuwaste.warehouse.store import Warehouse

START = datetime(2026, 11, 1, 23, 40, tzinfo=UTC)  # jobs cross midnight: two day partitions

state = st.sampled_from([(0.0, 0.0), (0.0, 2048.0), (55.0, 4096.0), (100.0, 9000.0)])
gpu_series = st.lists(
    st.tuples(st.integers(min_value=1, max_value=120), state), min_size=1, max_size=60
)


def _frames(
    gpus: list[list[tuple[int, tuple[float, float]]]],
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, datetime]:
    rows = []
    end = START
    for g, pts in enumerate(gpus):
        t = START
        for step, (util, mem) in pts:
            t += timedelta(seconds=step)
            rows.append(
                {
                    "host": "h",
                    "gpu": g,
                    "ts": t,
                    "util": util,
                    "mem_used_mib": mem,
                    "mem_total_mib": 16384.0,
                }
            )
        end = max(end, t)
    end += timedelta(seconds=7)
    samples = pl.DataFrame(rows).with_columns(pl.col("ts").dt.cast_time_unit("us"))
    jobs = pl.DataFrame(
        {
            "job_id": ["j"],
            "user": ["u"],
            "vc": ["v"],
            "state": ["passed"],
            "submit_ts": [START],
            "start_ts": [START],
            "end_ts": [end],
            "gpus": [len(gpus)],
            "is_debug": [False],
        }
    )
    job_gpus = pl.DataFrame(
        {
            "job_id": ["j"] * len(gpus),
            "attempt": [0] * len(gpus),
            "host": ["h"] * len(gpus),
            "gpu": list(range(len(gpus))),
            "start_ts": [START] * len(gpus),
            "end_ts": [end] * len(gpus),
        }
    )
    return samples, jobs, job_gpus, end


def _analyzed(
    data_dir: Path,
    samples: pl.DataFrame,
    jobs: pl.DataFrame,
    job_gpus: pl.DataFrame,
    cuts: list[datetime],
    end: datetime,
) -> dict[str, pl.DataFrame]:
    wh = Warehouse(data_dir)
    edges = [START, *sorted(c for c in cuts if START < c < end), end]
    for a, b in itertools.pairwise(edges):
        part = samples.filter((pl.col("ts") >= a) & (pl.col("ts") < b))
        wh.replace_window("gpu_samples", "c", a, b, part)
    wh.upsert("jobs", "c", "t", jobs)
    wh.upsert("job_gpus", "c", "t", job_gpus)
    analyze(Settings(data_dir=data_dir), quiet=True)
    return {
        n: wh.read(n, "c").sort(pl.all())
        for n in ("job_gpu_usage", "idle_slots", "stable_phases", "job_util_hist", "job_usage")
    }


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    gpus=st.lists(gpu_series, min_size=1, max_size=2),
    cuts=st.lists(st.integers(min_value=1, max_value=7000), max_size=4),
)
def test_accounting_identity_and_partition_independence(
    gpus: list[list[tuple[int, tuple[float, float]]]], cuts: list[int]
) -> None:
    samples, jobs, job_gpus, end = _frames(gpus)
    with tempfile.TemporaryDirectory() as one, tempfile.TemporaryDirectory() as two:
        whole = _analyzed(Path(one), samples, jobs, job_gpus, [], end)
        split = _analyzed(
            Path(two), samples, jobs, job_gpus, [START + timedelta(seconds=c) for c in cuts], end
        )
    usage = whole["job_gpu_usage"]
    assert usage.height == len(gpus)
    for r in usage.iter_rows(named=True):
        total = r["idle_slot_s"] + r["never_used_s"] + r["busy_s"] + r["missing_s"]
        assert abs(total - r["alloc_s"]) < 1e-6, r
        assert min(r["idle_slot_s"], r["never_used_s"], r["busy_s"], r["missing_s"]) >= 0, r
        assert not (r["never_used"] and r["idle_slot_s"] > 0)
    for name, df in whole.items():
        assert split[name].equals(df), name
