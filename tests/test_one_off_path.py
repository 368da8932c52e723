"""The README's one-off commands give the same warehouse as a configured cluster, and the truth.

The generator's files (metrics.om with DCGM `hpc_job` labels, sacct.txt, truth.json) are
ingested through the real command line (typer's runner on `gpuwaste.cli.app`, in a fresh working
directory, so the default `./gpuwaste-data` is used, as the README writes the commands):

- `readme`: `gpuwaste ingest openmetrics --file metrics.om --cluster gen`, then
  `gpuwaste ingest slurm --file sacct.txt --cluster gen`, then `gpuwaste analyze`;
- `reverse`: the same two ingests the other way round, then `gpuwaste analyze`;
- `incremental`: openmetrics, `analyze`, slurm, openmetrics again, `analyze` (the second analyze
  must notice that the label-derived jobs gave way to Slurm's, and a re-run must not bring
  them back);
- `configured`: one `[[clusters]]` with `[clusters.openmetrics]` and `[clusters.slurm]` in a
  gpuwaste.toml, `gpuwaste ingest` then `gpuwaste analyze`.

Every path must give the configured path's `jobs`, `job_gpus` and every result table, row for
row, and the configured path must recover the planted truth.
"""

from __future__ import annotations

import json
import shlex
from datetime import datetime
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from typer.testing import CliRunner

from gpuwaste.cli import app
from gpuwaste.generate import GeneratorSpec, write_all
from gpuwaste.warehouse.results import RESULT_TABLES
from gpuwaste.warehouse.store import Warehouse

CLUSTER = "gen"
INTERVAL = 15
OPENMETRICS = f"gpuwaste ingest openmetrics --file metrics.om --cluster {CLUSTER}"
SLURM = f"gpuwaste ingest slurm --file sacct.txt --cluster {CLUSTER}"
ANALYZE = "gpuwaste analyze"
PATHS: dict[str, list[str]] = {
    "readme": [OPENMETRICS, SLURM, ANALYZE],
    "reverse": [SLURM, OPENMETRICS, ANALYZE],
    "incremental": [OPENMETRICS, ANALYZE, SLURM, OPENMETRICS, ANALYZE],
    "configured": ["gpuwaste ingest", ANALYZE],
}
CONFIG = f"""
[[clusters]]
name = "{CLUSTER}"

[clusters.openmetrics]
file = "metrics.om"

[clusters.slurm]
file = "sacct.txt"
"""
COMPARED = ("jobs", "job_gpus", *sorted(RESULT_TABLES))


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("generated")
    spec = GeneratorSpec(seed=7, gpus=16, days=0.5, interval_s=INTERVAL, cluster=CLUSTER)
    write_all(spec, out)
    return out


def _run_path(name: str, generated: Path, base: Path, monkeypatch: pytest.MonkeyPatch) -> Warehouse:
    """Run one path's command lines in a fresh folder holding the generator's files."""
    cwd = base / name
    cwd.mkdir()
    for f in ("metrics.om", "sacct.txt"):
        (cwd / f).symlink_to(generated / f)
    if name == "configured":
        (cwd / "gpuwaste.toml").write_text(CONFIG)
    with monkeypatch.context() as m:
        m.chdir(cwd)
        m.delenv("GPUWASTE_CONFIG", raising=False)
        for line in PATHS[name]:
            argv = shlex.split(line)
            assert argv[0] == "gpuwaste"
            res = CliRunner().invoke(app, argv[1:])
            assert res.exit_code == 0, (line, res.output, res.exception)
    return Warehouse(cwd / "gpuwaste-data")


@pytest.fixture(scope="module")
def warehouses(generated: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Warehouse]:
    base = tmp_path_factory.mktemp("paths")
    with pytest.MonkeyPatch.context() as mp:
        return {name: _run_path(name, generated, base, mp) for name in PATHS}


def _table(wh: Warehouse, name: str) -> pl.DataFrame:
    df = wh.read(name, CLUSTER)
    return df.select(sorted(df.columns)).sort(pl.all())


@pytest.mark.parametrize("path", ["readme", "reverse", "incremental"])
def test_one_off_path_equals_configured_path(path: str, warehouses: dict[str, Warehouse]) -> None:
    mine, configured = warehouses[path], warehouses["configured"]
    for name in COMPARED:
        a, b = _table(mine, name), _table(configured, name)
        assert a.equals(b), (name, a.height, b.height)


def test_jobs_come_once_from_the_scheduler(warehouses: dict[str, Warehouse]) -> None:
    for path, wh in warehouses.items():
        jobs = wh.read("jobs", CLUSTER)
        assert jobs["job_id"].is_unique().all(), path
        assert set(jobs["source"].to_list()) == {"slurm"}, path
        assert wh.read("job_gpus", CLUSTER).filter(pl.col("gpu") < 0).height == 0, path


def _ts(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _truth(generated: Path) -> dict[str, Any]:
    truth: dict[str, Any] = json.loads((generated / "truth.json").read_text())
    return truth


def test_configured_path_recovers_the_truth(
    generated: Path, warehouses: dict[str, Warehouse]
) -> None:
    truth, wh = _truth(generated), warehouses["configured"]
    usage = wh.read("job_usage", CLUSTER)
    assert sorted(usage["job_id"].to_list()) == sorted(j["job_id"] for j in truth["jobs"])
    declared = set(usage.filter(pl.col("is_debug_declared"))["job_id"].to_list())
    assert declared == set(truth["debug_jobs"])
    assert usage.filter(pl.col("is_debug"))["idle_share"].max() <= 100  # type: ignore[operator]
    allocs = {(r["job_id"], r["host"], r["gpu"]) for r in wh.read("job_gpus", CLUSTER).to_dicts()}
    planted = {(j["job_id"], a["host"], a["gpu"]) for j in truth["jobs"] for a in j["alloc"]}
    assert allocs == planted
    never = wh.read("job_gpu_usage", CLUSTER).filter(pl.col("never_used"))
    mine = {(r["job_id"], r["host"], r["gpu"]) for r in never.to_dicts()}
    assert mine == {(n["job_id"], n["host"], n["gpu"]) for n in truth["never_used"]}
    slots = wh.read("idle_slots", CLUSTER)
    assert slots.height == len(truth["idle_slots"])
    for s in truth["idle_slots"]:
        hits = slots.filter(
            (pl.col("job_id") == s["job_id"])
            & (pl.col("host") == s["host"])
            & (pl.col("gpu") == s["gpu"])
            & ((pl.col("start_ts") - _ts(s["start"])).dt.total_seconds().abs() <= INTERVAL)
            & ((pl.col("end_ts") - _ts(s["end"])).dt.total_seconds().abs() <= INTERVAL)
        )
        assert hits.height == 1, s
