"""What power costs `gpuwaste analyze --rebuild`: the same generated cluster analyzed with its
samples' `power_w` and with that column dropped (no energy computed), alternately, in one run.

    python bench/energy_overhead.py --gpus 64 --days 2 --repeat 3

Prints the median wall time of each and their ratio (issue #44 asks for at most 1.15).
"""

from __future__ import annotations

import shutil
import statistics
import sys
from pathlib import Path

import polars as pl
from analyze import cluster_arguments, prepare, timed


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
    no_power = args.work / "warehouse-no-power"
    without_power(with_power, no_power)
    walls: dict[str, list[float]] = {"with power": [], "without power": []}
    for _ in range(args.repeat):
        for label, data in (("with power", with_power), ("without power", no_power)):
            cmd = [sys.executable, "-m", "gpuwaste", "analyze", "--data-dir", str(data)]
            walls[label].append(timed([*cmd, "--rebuild", "--quiet"]).wall)
    med = {k: statistics.median(v) for k, v in walls.items()}
    print("| samples | with power (s) | without (s) | ratio |\n| --- | --- | --- | --- |")
    ratio = med["with power"] / med["without power"]
    print(f"| {n:,} | {med['with power']:.1f} | {med['without power']:.1f} | {ratio:.3f} |")
    print({k: [round(x, 1) for x in v] for k, v in walls.items()})


if __name__ == "__main__":
    main()
