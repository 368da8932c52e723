"""Benchmark: `gpuwaste job` within 1 s and every digest (dry run) within 5 s, on 1 M jobs.

    .venv/bin/python bench/act_job_notify.py [--jobs 1000000] [--data-dir D] [--keep] [--repeat 5]

1. writes the synthetic result warehouse of bench/dashboard.py (bench/harness/result_warehouse.py:
   every result table, ~3 GPUs per job, idle slots for every GPU, samples for drill-down jobs);
2. `gpuwaste job`: the report of a drill-down job (with samples: the strip) and of a bulk job,
   gathered and rendered in this process (median of --repeat, a fresh connection each time), and
   the whole command in a new process (Python start and imports included); baseline in the same
   process: the one query that fetches the job's `job_usage` row. The start-up every command
   pays: `import gpuwaste.cli` in a new process, against a bare `python -c pass`;
3. `gpuwaste notify` dry run over the warehouse's 7 days, every user with an address and every
   VC with an owner: planned and printed in this process, and the whole command in a new
   process; baseline in the same process: `report --by user` (`waste_by`) over the same window.

Prints a markdown table for bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import io
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

from harness.result_warehouse import START, build_result_warehouse  # noqa: E402

from gpuwaste.act.job_report import gather, render_text  # noqa: E402
from gpuwaste.act.notify.run import Options, plan, print_dry_run  # noqa: E402
from gpuwaste.analyses.waste_by import waste_by  # noqa: E402
from gpuwaste.config import NotifyConfig, Settings  # noqa: E402
from gpuwaste.warehouse.readonly import read_only_connection  # noqa: E402

DASHBOARD = "http://127.0.0.1:8501"


Timing = tuple[float, float]  # (wall s, CPU s of every thread), medians


def median_s(fn: Callable[[], object], repeat: int) -> Timing:
    """Wall time and CPU time: on a machine shared with other work, wall time grows with the
    load while CPU time (all of DuckDB's threads) does not."""
    walls, cpus = [], []
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    return statistics.median(walls), statistics.median(cpus)


def cli_s(args: list[str], repeat: int, module: bool = True) -> Timing:
    """`python -m gpuwaste ARGS` (or `python ARGS`) as a new process, wall and CPU time."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, *(["-m", "gpuwaste"] if module else []), *args]
    walls, cpus = [], []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        subprocess.run(command, check=True, env=env, stdout=subprocess.DEVNULL)
        walls.append(time.perf_counter() - t)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return statistics.median(walls), statistics.median(cpus)


def python_s(code: str, repeat: int) -> Timing:
    """A new interpreter running `code` (this repository first on its path)."""
    return cli_s(["-c", code], repeat, module=False)


def a_drill_job(data_dir: Path) -> str | None:
    """A job of the warehouse with samples (its report draws the strip from them)."""
    con = read_only_connection(data_dir)
    try:
        row = con.execute(
            "select s.job_id from gpu_samples as s join job_usage as j using (cluster, job_id) "
            "limit 1"
        ).fetchone()
    finally:
        con.close()
    return None if row is None else str(row[0])


def job_row(data_dir: Path, job_id: str) -> None:
    con = read_only_connection(data_dir)
    try:
        con.execute("select * from job_usage where job_id = ?", [job_id]).fetchall()
    finally:
        con.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=1_000_000)
    ap.add_argument("--data-dir", type=Path)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="gw-act-")) / "wh"
    t = time.perf_counter()
    if not (data_dir / "parquet" / "job_usage").is_dir():
        built = build_result_warehouse(data_dir, n_jobs=args.jobs, drill_jobs=20)
        drill, jobs = built.drill_jobs[0], built.jobs
    else:
        from gpuwaste.warehouse.store import Warehouse

        jobs = Warehouse(data_dir).read("job_usage")
        drill = a_drill_job(data_dir) or ""
    build_s = time.perf_counter() - t
    bulk = jobs.sort("gpu_s", descending=True)["job_id"][len(jobs) // 2]
    drill = drill or bulk
    users, vcs = jobs["user"].n_unique(), jobs["vc"].unique().to_list()
    print(f"warehouse: {jobs.height:,} jobs, {users} users, {len(vcs)} VCs ({build_s:.0f} s)")

    load_before = os.getloadavg()[0]
    rows = [
        (
            "start-up: `import gpuwaste.cli`, new process",
            python_s("import gpuwaste.cli", args.repeat),
            python_s("pass", args.repeat),
        )
    ]
    base = median_s(lambda: job_row(data_dir, drill), args.repeat)
    for label, job_id in (("drill-down job (strip from samples)", drill), ("bulk job", bulk)):
        s = median_s(
            lambda j=job_id: render_text(gather(data_dir, j, None, DASHBOARD)), args.repeat
        )
        rows.append((f"`gpuwaste job`, {label}, in process", s, base))
    rows.append(
        (
            "`gpuwaste job` drill-down job, whole command (new process)",
            cli_s(["job", drill, "--data-dir", str(data_dir)], args.repeat),
            base,
        )
    )

    until = START + timedelta(days=7)
    cfg = NotifyConfig(
        address_template="{user}@example.org",
        vc_owners={v: [f"owner-{i}@example.org"] for i, v in enumerate(sorted(vcs))},
    )
    settings = Settings(data_dir=data_dir, notify=cfg)
    opts = Options(since="7d", until=until.isoformat())

    def dry_run() -> int:
        p, _ = plan(settings, opts, datetime.now(UTC))
        print_dry_run(p, None, io.StringIO())
        return len(p.messages)

    messages = dry_run()
    base_n = median_s(lambda: waste_by(settings, "user", since=START, until=until), args.repeat)
    rows.append(("all digests, dry run, in process", median_s(dry_run, args.repeat), base_n))
    config = data_dir.parent / "bench-notify.toml"
    config.write_text(
        '[notify]\naddress_template = "{user}@example.org"\n'
        + "vc_owners = { "
        + ", ".join(f'"{v}" = ["owner-{i}@example.org"]' for i, v in enumerate(sorted(vcs)))
        + " }\n"
    )
    cli = cli_s(
        ["notify", "--config", str(config), "--data-dir", str(data_dir), "--until",
         until.isoformat()],
        args.repeat,
    )  # fmt: skip
    rows.append(("all digests, dry run, whole command (new process)", cli, base_n))

    load = os.getloadavg()[0]
    print(
        f"\nMeasured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {platform.node()} "
        f"({platform.machine()}, {os.cpu_count()} cores), Python {platform.python_version()}; "
        f"1-minute load {load_before:.1f} before the run, {load:.1f} after. Median of "
        f"{args.repeat}. Drill-down job {drill}, bulk job {bulk}. "
        f"{messages} digests (users over the default thresholds + one per VC).\n"
    )
    print("| what | wall | CPU | baseline wall / CPU | ratio (wall) |")
    print("| --- | --- | --- | --- | --- |")
    for what, (w, c), (bw, bc) in rows:
        print(f"| {what} | {w:.3f} s | {c:.3f} s | {bw:.3f} s / {bc:.3f} s | {w / bw:.1f}x |")
    if not args.keep and args.data_dir is None:
        shutil.rmtree(data_dir.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
