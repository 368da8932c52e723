"""What held idle (#44) costs `gpuwaste analyze --rebuild`: the same generated cluster analyzed
by this checkout and by a checkout of the code before it (`--baseline`, e.g. a `git worktree`
of the commit before), alternately, each in a child process with that checkout first on the
path; and the seconds of the steps held idle changes (the window pass `job_samples`, which
flags held samples, `sample_flags`, which ends runs where the flags change, and the pure steps
waited for, where the held stretches are paired; pure steps are not timed one by one).

    git worktree add /tmp/before <commit before>
    python bench/held_idle_overhead.py --gpus 64 --days 2 --repeat 3 --baseline /tmp/before

Prints the median wall time of each, their ratio, the steps' median seconds, and the median CPU
time of each (user + system, all threads; less moved by other processes on a shared machine).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path

from analyze import cluster_arguments, prepare, timed

CHILD = """
import json, sys
from pathlib import Path
from gpuwaste.analyses.run import analyze_cluster
from gpuwaste.config import Settings
run = analyze_cluster(Settings(data_dir=Path(sys.argv[1])), "bench", rebuild=True)
print(json.dumps(run.seconds))
"""
STEPS = ("job_samples", "sample_flags", "pure steps (waited for)")
HERE = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = cluster_arguments(__doc__)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--baseline", type=Path, required=True, help="a checkout of the code before")
    args = ap.parse_args()
    n = prepare(args.work, args.gpus, args.days, args.seed)
    data = str(args.work / "warehouse")
    walls: dict[str, list[float]] = {"held idle": [], "before": []}
    steps: dict[str, list[float]] = {"held idle": [], "before": []}
    cpus: dict[str, list[float]] = {"held idle": [], "before": []}
    for _ in range(args.repeat):
        for label, code in (("held idle", HERE), ("before", args.baseline.resolve())):
            os.environ["PYTHONPATH"] = str(code)
            got = timed([sys.executable, "-c", CHILD, data])
            walls[label].append(got.wall)
            cpus[label].append(got.cpu)
            seconds = json.loads(got.out.splitlines()[-1])
            steps[label].append(sum(seconds.get(s, 0.0) for s in STEPS))
    med = {k: statistics.median(v) for k, v in walls.items()}
    print("| samples | held idle (s) | before (s) | ratio | the steps, held idle / before (s) |")
    print("| --- | --- | --- | --- | --- |")
    ratio = med["held idle"] / med["before"]
    print(
        f"| {n:,} | {med['held idle']:.1f} | {med['before']:.1f} | {ratio:.3f} | "
        f"{statistics.median(steps['held idle']):.2f} / {statistics.median(steps['before']):.2f} |"
    )
    print({k: [round(x, 1) for x in v] for k, v in walls.items()})
    print({k: [round(x, 2) for x in v] for k, v in steps.items()})
    cpu = {k: statistics.median(v) for k, v in cpus.items()}
    print(f"CPU s, held idle / before: {cpu['held idle']:.2f} / {cpu['before']:.2f}")
    print("cpu", {k: [round(x, 2) for x in v] for k, v in cpus.items()})


if __name__ == "__main__":
    main()
