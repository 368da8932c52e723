"""Benchmark: ingest a Philly-format `cluster_gpu_util` of >= 10 M rows; polars' read_csv as baseline.

    .venv/bin/python bench/ingest_files.py [--rows 10000000] [--work /tmp/gpuwaste-bench]

The big file is written by `write_gpu_util` below, a small vectorised writer of the trace's
format (header of 10 names, data rows ending in a trailing comma, `NA` for offline GPUs and for
gpu4-gpu7 of 4-GPU machines, a few 18-field rows, ` PDT`/` PST` suffixes across the 2017-11-05
fall-back, 552 machines, one row per machine per minute). It is not the generator's Philly
writer: that one simulates every GPU at the sampling interval and builds the whole file as a list
of Python strings, which for 10 M rows (about 80 M GPU-minutes) does not fit this 2-core machine's
time budget; the generator's Philly files are checked for correctness by
tests/test_ingest_philly_generated.py instead.

Each measurement runs in its own child process, which reports its own peak RSS
(`ru_maxrss`), so the three figures do not contaminate each other:

1. `parse`: gpuwaste's streaming reader + parser (`iter_byte_chunks` + `parse_chunk`), long-format
   samples produced and dropped (parse throughput alone);
2. `ingest`: `gpuwaste.ingest.philly.source.ingest_philly` end to end into a fresh warehouse
   (staging, day-by-day `replace_window`, zstd parquet);
3. `polars read_csv`: `pl.read_csv` of the same file (wide rows, no reshaping, no time parsing),
   the baseline.

Rows are CSV data rows (machine-minutes); samples are the GPU values they hold.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl

MACHINES = 552
START = datetime(2017, 10, 30, 7, 0, tzinfo=UTC)  # 2017-10-30 00:00 PDT; 10 M rows reach past 11-05
BLOCK_MINUTES = 2000


def write_gpu_util(path: Path, rows: int, seed: int = 0) -> int:
    """Write a Philly-format cluster_gpu_util with `rows` data rows; returns rows written."""
    rng = np.random.default_rng(seed)
    names = [f"m{i}" for i in range(MACHINES)]
    four_gpu = rng.random(MACHINES) < 0.5  # about half the machines have 4 GPUs
    written = 0
    with open(path, "wb") as fh:
        header = "time,machineId," + ",".join(f"gpu{i}_util" for i in range(8)) + "\n"
        fh.write(header.encode())
        minute = 0
        while written < rows:
            n_min = min(BLOCK_MINUTES, -(-(rows - written) // MACHINES))
            t0 = START + timedelta(minutes=minute)
            times = pl.datetime_range(
                t0, t0 + timedelta(minutes=n_min - 1), "1m", eager=True, time_zone="UTC"
            )
            labels = times.dt.convert_time_zone("America/Los_Angeles").dt.strftime(
                "%Y-%m-%d %H:%M:%S %Z"
            )
            n = min(n_min * MACHINES, rows - written)
            idx = np.arange(n)
            m = idx % MACHINES
            util = np.round(rng.random((n, 8)) * 100, 6)
            cols: dict[str, pl.Series] = {
                "time": labels.gather(pl.Series(idx // MACHINES)),
                "machineId": pl.Series(names).gather(pl.Series(m)),
            }
            for k in range(8):
                na = rng.random(n) < 0.03
                if k >= 4:
                    na |= four_gpu[m]
                s = pl.Series(util[:, k]).cast(pl.String)
                cols[f"gpu{k}_util"] = pl.select(
                    pl.when(pl.Series(na)).then(pl.lit("NA")).otherwise(s)
                ).to_series()
            cols["_trail"] = pl.Series([""] * n)
            df = pl.DataFrame(cols)
            odd = rng.random(n) < 1e-4  # 18-field rows: each value followed by an empty field
            plain = df.filter(~pl.Series(odd))
            plain.write_csv(fh, include_header=False, quote_style="never")
            for r in df.filter(pl.Series(odd)).iter_rows():
                fh.write((f"{r[0]},{r[1]}," + ",,".join(r[2:10]) + ",\n").encode())
            written += n
            minute += n_min
    return written


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child_parse(path: Path) -> dict[str, float]:
    from gpuwaste.ingest.philly.parse import GPU_UTIL, parse_chunk
    from gpuwaste.ingest.philly.source import iter_byte_chunks

    t = time.perf_counter()
    rows = samples = refused = 0
    for first, data in iter_byte_chunks(path):
        good, bad, n = parse_chunk(GPU_UTIL, data, first, str(path))
        rows += n
        samples += good.height
        refused += bad.height
    return {
        "seconds": time.perf_counter() - t,
        "rows": rows,
        "samples": samples,
        "refused": refused,
    }


def child_ingest(path: Path, work: Path) -> dict[str, float]:
    import shutil

    from gpuwaste.config import ClusterConfig, PhillySource, Settings
    from gpuwaste.ingest.philly.source import ingest_philly

    trace = work / "trace"
    data = work / "warehouse"
    shutil.rmtree(data, ignore_errors=True)
    trace.mkdir(parents=True, exist_ok=True)
    (trace / "cluster_job_log").write_text("[]\n")
    link = trace / "cluster_gpu_util"
    link.unlink(missing_ok=True)
    link.symlink_to(path.resolve())
    t = time.perf_counter()
    r = ingest_philly(
        Settings(data_dir=data), ClusterConfig(name="bench", philly=PhillySource(dir=trace))
    )
    secs = time.perf_counter() - t
    return {
        "seconds": secs,
        "rows": r.accepted + len(r.refused),
        "samples": r.written.get("gpu_samples", 0),
        "refused": len(r.refused),
    }


def child_polars(path: Path) -> dict[str, float]:
    t = time.perf_counter()
    df = pl.read_csv(path, truncate_ragged_lines=True, null_values="NA")
    return {"seconds": time.perf_counter() - t, "rows": df.height, "samples": 0, "refused": 0}


def run_child(kind: str, path: Path, work: Path) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", kind, "--file", str(path), "--work", str(work)],
        check=False,
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        raise SystemExit(f"{kind} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--work", type=Path, default=Path("/tmp/gpuwaste-bench"))
    ap.add_argument("--file", type=Path)
    ap.add_argument("--child")
    ap.add_argument("--steps", default="polars,parse,ingest")
    args = ap.parse_args()
    if args.child:
        fn = {"parse": lambda: child_parse(args.file), "ingest": lambda: child_ingest(args.file, args.work),
              "polars": lambda: child_polars(args.file)}[args.child]  # fmt: skip
        res = fn()
        res["peak_rss_mib"] = _rss_mib()
        print(json.dumps(res))
        return
    args.work.mkdir(parents=True, exist_ok=True)
    path = args.work / "cluster_gpu_util"
    if (
        not path.exists()
        or path.stat().st_size == 0
        or (args.file is None and _rows_of(path) != args.rows)
    ):
        t = time.perf_counter()
        n = write_gpu_util(path, args.rows)
        print(
            f"wrote {n:,} rows ({path.stat().st_size / 2**20:,.0f} MiB) in {time.perf_counter() - t:.1f} s"
        )
    print(f"file: {path} ({path.stat().st_size / 2**20:,.0f} MiB), cores: {os.cpu_count()}")
    print("| step | rows | GPU samples | seconds | rows/s | peak RSS |")
    print("| --- | --- | --- | --- | --- | --- |")
    for kind, label in (("polars", "polars read_csv (baseline)"), ("parse", "gpuwaste parse (stream)"),
                        ("ingest", "gpuwaste ingest philly (to warehouse)")):  # fmt: skip
        if kind not in args.steps.split(","):
            continue
        r = run_child(kind, path, args.work)
        print(
            f"| {label} | {int(r['rows']):,} | {int(r['samples']):,} | {r['seconds']:.1f} | "
            f"{r['rows'] / r['seconds'] / 1e6:.2f} M | {r['peak_rss_mib']:,.0f} MiB |",
            flush=True,
        )


def _rows_of(path: Path) -> int:
    with open(path, "rb") as fh:
        return sum(buf.count(b"\n") for buf in iter(lambda: fh.read(1 << 24), b"")) - 1


if __name__ == "__main__":
    main()
