"""`gpuwaste analyze --rebuild` on the local engine, on Spark local[2] and on a Spark standalone
cluster of two workers (one core each, on this machine), side by side in one run, with the peak
RSS of every process: the local engine; the Spark driver (its Python and its JVM); each executor
(its JVM plus the Python workers it runs).

    python bench/analyze_engines.py --work /tmp/spark-bench1x     # 41 M samples (bench/analyze.py)
    python bench/analyze_engines.py --work /tmp/spark-bench4x --gpus 2048

The warehouse is bench/analyze.py's (`prepare`: generated once into WORK/warehouse). Peak RSS is
sampled from /proc every 0.2 s over the whole process tree (a peak shorter than that can be
missed). Figures go to stdout as a markdown table (copy into bench/RESULTS.md).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

from analyze import cluster_arguments, prepare  # noqa: E402  (bench/analyze.py)
from harness.spark import StandaloneCluster, spark_home  # noqa: E402

GIB = 1024**3
PAGE = os.sysconf("SC_PAGE_SIZE")


def _processes() -> dict[int, tuple[int, int, str]]:
    """pid -> (parent pid, RSS bytes, command line) of every process we may read."""
    out = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
            rss_pages = int(Path(entry.path, "statm").read_text().split()[1])
            cmd = Path(entry.path, "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError):
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        out[int(entry.name)] = (ppid, rss_pages * PAGE, cmd)
    return out


def _role(cmd: str) -> str:
    if "CoarseGrainedExecutorBackend" in cmd:
        return "executor JVM"
    if "pyspark.daemon" in cmd or "pyspark/daemon.py" in cmd or "pyspark.worker" in cmd:
        return "python worker"
    if "java" in cmd.split(" ")[0] and "SparkSubmit" in cmd:
        return "driver JVM"
    if "gpuwaste" in cmd and "analyze" in cmd:
        return "driver (gpuwaste analyze)"
    return "other"


@dataclass
class Peaks:
    """Max RSS per role (one process) and per executor (its JVM + Python workers)."""

    role: dict[str, int] = field(default_factory=dict)
    executor_total: int = 0

    def add(self, roots: list[int]) -> None:
        procs = _processes()
        children: dict[int, list[int]] = {}
        for pid, (ppid, _, _) in procs.items():
            children.setdefault(ppid, []).append(pid)

        def tree(pid: int) -> list[int]:
            out, todo = [], [pid]
            while todo:
                p = todo.pop()
                out.append(p)
                todo.extend(children.get(p, []))
            return out

        for root in roots:
            for pid in tree(root):
                if pid not in procs:
                    continue
                _, rss, cmd = procs[pid]
                role = _role(cmd)
                self.role[role] = max(self.role.get(role, 0), rss)
                if role == "executor JVM":
                    total = sum(procs[p][1] for p in tree(pid) if p in procs)
                    self.executor_total = max(self.executor_total, total)


def run(cmd: list[str], extra_roots: list[int]) -> tuple[float, Peaks]:
    peaks = Peaks()
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peaks.add([proc.pid, *extra_roots])
            time.sleep(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, err = proc.communicate()
    wall = time.perf_counter() - t
    done.set()
    sampler.join()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{err[-3000:]}")
    return wall, peaks


def main() -> None:
    ap = cluster_arguments(__doc__)
    ap.add_argument("--batch-days", type=int, default=1, help="for every engine")
    ap.add_argument(
        "--engines",
        default="local,local-batch,spark-local,cluster",
        help="which runs, comma-separated (default: all four)",
    )
    args = ap.parse_args()
    samples = prepare(args.work, args.gpus, args.days, args.seed)
    data = args.work / "warehouse"
    # the console script's entry point, whatever script an older install left in the venv
    base = [sys.executable, "-m", "gpuwaste", "analyze", "--rebuild", "--quiet"]
    base += ["--data-dir", str(data)]
    batch = ["--batch-days", str(args.batch_days)]
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(REPO), os.environ.get("PYTHONPATH")])
    )
    spark_local = [*base, *batch, "--engine", "spark", "--spark-master", "local[2]"]
    chosen = args.engines.split(",")
    rows = []
    if "local" in chosen:
        rows.append(("local engine (default --batch-days 7)", *run(base, [])))
    if "local-batch" in chosen:
        rows.append((f"local engine, --batch-days {args.batch_days}", *run([*base, *batch], [])))
    if "spark-local" in chosen:
        rows.append(("Spark local[2]", *run(spark_local, [])))
    if "cluster" in chosen:
        cluster = StandaloneCluster(spark_home(), args.work / "spark-cluster")
        try:
            cluster.start(workers=2)
            roots = [w.pid for w in cluster.workers]
            cmd = [*base, *batch, "--engine", "spark", "--spark-master", cluster.url]
            rows.append(("Spark standalone, 2 workers x 1 core", *run(cmd, roots)))
        finally:
            cluster.stop()
    print(f"{samples:,} GPU samples ({args.gpus} GPUs x {args.days} days at 15 s)\n")
    print(
        "| engine | wall s | M samples/s | peak RSS GiB: driver / local process | driver JVM "
        "| executor JVM | one Python worker | executor JVM + its workers |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, wall, p in rows:
        r = p.role

        def gib(key: str, r: dict[str, int] = r) -> str:
            return f"{r[key] / GIB:.2f}" if key in r else "-"

        total = f"{p.executor_total / GIB:.2f}" if p.executor_total else "-"
        print(
            f"| {name} | {wall:.1f} | {samples / wall / 1e6:.2f} | {gib('driver (gpuwaste analyze)')} "
            f"| {gib('driver JVM')} | {gib('executor JVM')} | {gib('python worker')} | {total} |"
        )


if __name__ == "__main__":
    main()
