"""The whole path on the bundled sample, as a new user runs it (`gpuwaste demo --no-serve`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent


def run(*args: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def demo_dir(demo_warehouse: Path) -> Path:
    """The session's demo warehouse (tests/conftest.py)."""
    return demo_warehouse


def test_demo_warehouse_answers_gpuwaste_sql(demo_dir: Path) -> None:
    out = run(
        str(BIN / "gpuwaste"),
        "sql",
        "--data-dir",
        str(demo_dir),
        "--format",
        "csv",
        "select count(*) as n from gpu_samples",
    )
    assert out.returncode == 0, out.stderr
    n = int(out.stdout.split()[1])
    assert n > 100_000


def test_demo_warehouse_answers_standalone_duckdb(demo_dir: Path) -> None:
    out = run(
        str(BIN / "duckdb"),
        "-readonly",
        "-csv",
        str(demo_dir / "gpuwaste.duckdb"),
        "-c",
        "select count(*) as n from gpu_samples; select count(*) as n from job_usage",
    )
    assert out.returncode == 0, out.stderr
    values = [int(v) for v in out.stdout.split() if v.isdigit()]
    assert len(values) == 2 and values[0] > 100_000 and values[1] > 10


def test_demo_twice_changes_nothing(demo_dir: Path) -> None:
    q = "select (select count(*) from gpu_samples), (select count(*) from jobs), (select count(*) from job_usage), (select count(*) from quarantine)"
    before = run(
        str(BIN / "gpuwaste"), "sql", "--data-dir", str(demo_dir), "--format", "csv", q
    ).stdout
    out = run(str(BIN / "gpuwaste"), "demo", "--no-serve", "--data-dir", str(demo_dir))
    assert out.returncode == 0, out.stderr[-3000:]
    assert "GPU hours allocated" in out.stdout
    after = run(
        str(BIN / "gpuwaste"), "sql", "--data-dir", str(demo_dir), "--format", "csv", q
    ).stdout
    assert before == after


def test_summary_utilization_is_the_time_weighted_mean_everywhere(demo_dir: Path) -> None:
    """The summary line's headline utilization is Philly Table 3's time-weighted mean, and
    waste_daily's util_gpu_h / observed_gpu_h (what the dashboard sums per period) gives it too."""
    from gpuwaste.demo import UTIL_NAME, summary_lines
    from gpuwaste.warehouse.catalog import connect

    con = connect(demo_dir)
    table3 = dict(
        con.sql(
            "select cluster, util_mean from util_by_size_status "
            "where vc = '(all)' and gpu_model = '(all)' and size = 'all' and state = 'all'"
        ).fetchall()
    )
    daily = dict(
        con.sql(
            "select cluster, 100 * sum(util_gpu_h) / sum(observed_gpu_h) from waste_daily "
            "where vc = '(all)' and gpu_model = '(all)' group by cluster"
        ).fetchall()
    )
    con.close()
    assert set(table3) == {"demo", "philly-sample"} and set(daily) == set(table3)
    lines = summary_lines(demo_dir)
    for cluster, util in table3.items():
        assert abs(daily[cluster] - util) < 1e-3
        line = next(x for x in lines if x.startswith(f"{cluster}:"))
        assert f"; {UTIL_NAME} {util:.0f}%;" in line
        assert "mean GPU utilization" not in line


def test_the_bundled_sample_plants_power_and_the_demo_shows_its_energy(demo_dir: Path) -> None:
    """sample_data/demo carries DCGM power and the energy counter (`make sample` after the
    generator learned them): the demo's energy per job x GPU is the planted truth within 1 %
    (allocations of 200 samples or more) and over the cluster, the energy lost too."""
    import json

    import polars as pl

    from gpuwaste.demo import sample_dir
    from gpuwaste.warehouse.store import Warehouse

    truth = pl.DataFrame(json.loads((sample_dir() / "truth.json").read_text())["energy"])
    found = Warehouse(demo_dir).read("job_gpu_usage", "demo")
    found = found.select("job_id", "host", "gpu", "energy_kwh", "lost_energy_kwh")
    assert found["energy_kwh"].null_count() == 0  # every GPU of the demo has power
    both = truth.join(found, on=["job_id", "host", "gpu"], suffix="_got")
    assert both.height == truth.height > 200
    long = both.filter(pl.col("samples") >= 200)
    err = (pl.col("energy_kwh_got") - pl.col("energy_kwh")).abs()
    assert long.height > 100 and long.filter(err > 0.01 * pl.col("energy_kwh")).is_empty()
    for col in ("energy_kwh", "lost_energy_kwh"):
        assert both[f"{col}_got"].sum() == pytest.approx(both[col].sum(), rel=0.01), col
    assert 0 < both["lost_energy_kwh"].sum() < both["energy_kwh"].sum()
