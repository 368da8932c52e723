"""A fingerprint of every result table, to prove that a change of code changed no result.

`digest_tables(data_dir, names)` reads each table's parquet files as stored (no gpuwaste code on
the reading side, so a redesign of the warehouse cannot fool it), puts the rows in one canonical
order and hashes them with the column names and types. Floats are rounded to 9 significant
digits first: DuckDB's parallel sums may differ in the last bits between two runs of the same
code, which is not a change of result.

`python -m tests.support.result_digest --update` rebuilds the reference warehouses and rewrites
`tests/data/result_digests.json`: do that only for a change that is meant to change results, and
say so in the commit.
"""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
from harness.result_warehouse import build_demo_warehouse

REPO = Path(__file__).resolve().parents[2]
DIGESTS = REPO / "tests" / "data" / "result_digests.json"
# recorded before the summaries were split by GPU model: `before_model_split` of today's tables
# must still give them
DIGESTS_BEFORE_MODEL_SPLIT = REPO / "tests" / "data" / "result_digests_before_model_split.json"
GENERATED = {"seed": 11, "gpus": 16, "days": 1, "cluster": "gen"}


def _round(x: float | None) -> float | None:
    if x is None or not math.isfinite(x) or x == 0:
        return x
    return float(f"{x:.9g}")


def _canonical(frame: pl.DataFrame) -> pl.DataFrame:
    cols = []
    for name, dtype in frame.schema.items():
        c = pl.col(name)
        if dtype.is_float():
            c = c.map_elements(_round, return_dtype=pl.Float64)
        cols.append(c.cast(pl.String).fill_null("<null>").alias(name))
    out = frame.select(cols) if cols else frame
    return out.sort(out.columns) if out.columns else out


Projection = Callable[[str, pl.DataFrame], pl.DataFrame]


# Columns added since the reference was recorded, each meant to leave every other column as it
# was: the digests are of the tables without them (their own tests check them).
ADDED_COLUMNS: dict[str, tuple[str, ...]] = {
    # issue 44: idle held versus empty, and held-idle energy
    "job_gpu_usage": ("idle_held_s", "idle_empty_s", "held_idle_energy_kwh"),
    "job_usage": ("looks_busy", "idle_held_gpu_s", "held_idle_energy_kwh"),  # and looks busy
}


def as_stored(name: str, frame: pl.DataFrame) -> pl.DataFrame:
    return frame.drop(ADDED_COLUMNS.get(name, ()), strict=False)


def before_summaries(name: str, frame: pl.DataFrame) -> pl.DataFrame:
    """The rows a table had before Jobstats summaries could give a GPU its figures (issue 43):
    job_gpu_usage without its `figures_from` column, which must then say no row took them
    from a summary (these warehouses hold none)."""
    if name != "job_gpu_usage" or "figures_from" not in frame.columns:
        return frame
    assert set(frame["figures_from"].drop_nulls()) <= {"samples"}, "a summary's figures"
    return frame.drop("figures_from")


def before_model_split(name: str, frame: pl.DataFrame) -> pl.DataFrame:
    """The rows a table had before the summaries were split by GPU model: each summary's rows of
    model '(all)' without the `gpu_model` column (waste_by_model, split by model from the start:
    its rows other than '(all)'), job_usage without its `gpu_model`."""
    frame = as_stored(name, frame)
    if name == "waste_by_model":
        return frame.filter(pl.col("gpu_model") != "(all)")
    if name == "job_usage":
        return frame.drop("gpu_model")
    if "gpu_model" in frame.columns and "job_id" not in frame.columns:
        return frame.filter(pl.col("gpu_model") == "(all)").drop("gpu_model")
    return frame


# Energy columns added after the digests were recorded, left out of every table's: the rest of
# each table must stay as it was (the energy of issue #44 is tested against the generator's truth
# instead).
ENERGY_COLUMNS = ("energy_kwh", "lost_energy_kwh", "power_mean_w")


def digest_table(data_dir: Path, name: str, projection: Projection = as_stored) -> dict[str, Any]:
    """{rows, sha256} of one table's stored rows (all clusters), through `projection`, without
    the `ADDED_COLUMNS` and the `ENERGY_COLUMNS`."""
    files = sorted(
        p for p in (data_dir / "parquet" / name).glob("**/*.parquet") if ".tmp" not in p.name
    )
    if not files:
        return {"rows": 0, "sha256": ""}
    frame = pl.concat(
        [pl.read_parquet(f, hive_partitioning=False) for f in files], how="diagonal_relaxed"
    )
    frame = as_stored(name, projection(name, frame)).drop(ENERGY_COLUMNS, strict=False)
    frame = frame.select(sorted(frame.columns))
    canon = _canonical(frame)
    h = hashlib.sha256()
    h.update(json.dumps({c: str(t) for c, t in frame.schema.items()}).encode())
    h.update(canon.write_csv().encode())
    return {"rows": frame.height, "sha256": h.hexdigest()}


def digest_tables(
    data_dir: Path, names: list[str], projection: Projection = as_stored
) -> dict[str, dict[str, Any]]:
    return {name: digest_table(data_dir, name, projection) for name in sorted(names)}


def _gpuwaste(*args: str, cwd: Path | None = None) -> None:
    exe = Path(sys.executable).parent / "gpuwaste"
    out = subprocess.run(
        [str(exe), *args], capture_output=True, text=True, cwd=cwd, timeout=900, check=False
    )
    if out.returncode != 0:
        raise RuntimeError(f"gpuwaste {' '.join(args)} failed:\n{out.stderr[-3000:]}")


def build_generated(base: Path) -> Path:
    """A generated cluster (Prometheus-format metrics + sacct) through a configured ingest."""
    src = base / "generated-src"
    g = GENERATED
    _gpuwaste(
        "generate", "--out", str(src), "--seed", str(g["seed"]), "--gpus", str(g["gpus"]),
        "--days", str(g["days"]), "--cluster", str(g["cluster"]),
    )  # fmt: skip
    d = base / "generated"
    config = base / "gpuwaste.toml"
    config.write_text(
        f'data_dir = "{d}"\n\n[[clusters]]\nname = "{g["cluster"]}"\n\n'
        f'[clusters.openmetrics]\nfile = "{src / "metrics.om"}"\n\n'
        f'[clusters.slurm]\nfile = "{src / "sacct.txt"}"\n'
    )
    _gpuwaste("ingest", "--config", str(config), "--quiet")
    _gpuwaste("analyze", "--config", str(config), "--quiet")
    return d


def result_table_names(data_dir: Path) -> list[str]:
    """Every table `gpuwaste analyze` wrote: the folders besides the fact tables."""
    facts = {"gpu_samples", "host_samples", "jobs", "job_gpus", "ingest_state", "quarantine"}
    return sorted(p.name for p in (data_dir / "parquet").iterdir() if p.name not in facts)


def compute(base: Path) -> dict[str, dict[str, dict[str, Any]]]:
    out = {}
    for label, build in (("demo", build_demo_warehouse), ("generated", build_generated)):
        d = build(base / label)
        out[label] = digest_tables(d, result_table_names(d))
    return out


if __name__ == "__main__":
    import tempfile

    if sys.argv[1:] != ["--update"]:
        sys.exit("usage: python -m tests.support.result_digest --update")
    with tempfile.TemporaryDirectory() as tmp:
        digests = compute(Path(tmp))
    DIGESTS.write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n")
    print(f"wrote {DIGESTS}")
