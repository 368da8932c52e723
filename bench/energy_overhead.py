"""What power costs `gpuwaste analyze --rebuild`: the same generated cluster analyzed with its
samples' `power_w` and with that column dropped (no energy computed, looks_busy judged by
nothing), alternately, in one run; and each run's seconds per step (`ClusterRun.seconds`: the
per-job pass's steps, the models' idle power measured before the batches for looks_busy's power
arm; the pure steps, energy and the looks-busy evidence among them, are timed together as what
the pass waited for them).

    python bench/energy_overhead.py --gpus 64 --days 2 --repeat 3

Both warehouses carry `gpu_util` (= `util`, as DCGM's ingest stores a GPU_UTIL-only export), so
that the busy step has every sample to judge: with power, by the power arm. Each analysis runs in
a child process (`analyze_cluster` of the bench cluster, rebuilt), which reports its per-step
seconds. Prints the median wall time of each and their ratio (issue #44 asks for at most 1.15),
the median CPU time of each (user + system, all threads; less moved by other processes on a
shared machine than wall time) and theirs, and the median seconds of each step with and
without power.
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
from pathlib import Path

import polars as pl
from analyze import cluster_arguments, prepare, timed

CHILD = """
import json, sys
from pathlib import Path
from gpuwaste.analyses.run import analyze_cluster
from gpuwaste.config import Settings
run = analyze_cluster(Settings(data_dir=Path(sys.argv[1])), "bench", rebuild=True)
print(json.dumps(run.seconds))
"""


def with_coarse(data: Path) -> None:
    """Give warehouse `data`'s samples the coarse busy metric (`gpu_util` = `util` where the
    generator left it null), once."""
    for f in (data / "parquet" / "gpu_samples").rglob("*.parquet"):
        df = pl.read_parquet(f, hive_partitioning=False)
        if "gpu_util" not in df.columns or df["gpu_util"].null_count():
            coarse = pl.coalesce(pl.col("^gpu_util$"), pl.col("util")).alias("gpu_util")
            df.with_columns(coarse).write_parquet(f)


def without_power(src: Path, dst: Path) -> None:
    """A copy of warehouse `src` whose samples have no power column."""
    if dst.exists():
        return
    shutil.copytree(src, dst)
    for f in (dst / "parquet" / "gpu_samples").rglob("*.parquet"):
        pl.read_parquet(f, hive_partitioning=False).drop("power_w").write_parquet(f)


def main() -> None:
    ap = cluster_arguments(__doc__)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    n = prepare(args.work, args.gpus, args.days, args.seed)
    with_power = args.work / "warehouse"
    with_coarse(with_power)
    no_power = args.work / "warehouse-no-power"
    without_power(with_power, no_power)
    walls: dict[str, list[float]] = {"with power": [], "without power": []}
    cpus: dict[str, list[float]] = {"with power": [], "without power": []}
    steps: dict[str, list[dict[str, float]]] = {"with power": [], "without power": []}
    for _ in range(args.repeat):
        for label, data in (("with power", with_power), ("without power", no_power)):
            got = timed([sys.executable, "-c", CHILD, str(data)])
            seconds = json.loads(got.out.splitlines()[-1])
            walls[label].append(got.wall)
            cpus[label].append(got.cpu)
            steps[label].append(seconds)
    med = {k: statistics.median(v) for k, v in walls.items()}
    cpu = {k: statistics.median(v) for k, v in cpus.items()}
    print("| samples | with power (s) | without (s) | ratio | CPU with / without (s) | CPU ratio |")
    print("| --- | --- | --- | --- | --- | --- |")
    ratio = med["with power"] / med["without power"]
    print(
        f"| {n:,} | {med['with power']:.1f} | {med['without power']:.1f} | {ratio:.3f} | "
        f"{cpu['with power']:.1f} / {cpu['without power']:.1f} | "
        f"{cpu['with power'] / cpu['without power']:.3f} |"
    )
    print("wall", {k: [round(x, 1) for x in v] for k, v in walls.items()})
    print("cpu", {k: [round(x, 1) for x in v] for k, v in cpus.items()})
    print()
    print("| step | with power (s) | without (s) |")
    print("| --- | --- | --- |")
    names = sorted({name for runs in steps.values() for run in runs for name in run})
    for name in names:
        w, wo = (statistics.median(r.get(name, 0.0) for r in steps[k]) for k in steps)
        print(f"| {name} | {w:.2f} | {wo:.2f} |")


if __name__ == "__main__":
    main()
