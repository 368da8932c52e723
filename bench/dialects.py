"""Benchmark: `ingest openmetrics` of the same cluster in each telemetry dialect, against DCGM.

    .venv/bin/python bench/dialects.py [--gpus 32] [--days 0.5] [--repeat 3]
        [--work /tmp/gpuwaste-bench-dialects]

One generated cluster (`gpuwaste generate`, DCGM with `hpc_job` labels) is read once by
gpuwaste (`gpu_rows`, DCGM) and written again in every other dialect from its declaration
(`gpuwaste/dialects.py`): each row's readings unscaled to the dialect's units, under its metric
names and labels (the host as its host label, else `instance`; nvidia-smi's index and name in
`nvidia_smi_gpu_info`; Jobstats' job both as a `jobid` label and, as `jobstats-gauge`, as the
value of `nvidia_gpu_jobId`; slurm-job-exporter's series only where a job runs), the node
exporter families copied as they are. The generator of issue #43 item 3 writes the dialects
itself; until then this is the bench's own writer.

Each file is ingested `--repeat` times into a fresh warehouse, alternating the dialects, in this
process; the table gives each dialect's median time and its ratio to DCGM's (target: within
1.5x), and the GPU rows each wrote (the same cluster: the same count, but slurm-job-exporter's,
which has no series where no job runs).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from gpuwaste.config import ClusterConfig, PrometheusLabels, Settings
from gpuwaste.dialects import DCGM, DIALECTS, Dialect, Series
from gpuwaste.ingest.prometheus.openmetrics_parse import parse_text
from gpuwaste.ingest.prometheus.openmetrics_source import ingest_openmetrics
from gpuwaste.ingest.prometheus.rows import gpu_rows

ROOT = Path(__file__).resolve().parent.parent


def _generate(out: Path, gpus: int, days: float) -> Path:
    path = out / "metrics.om"
    out.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        cmd = [sys.executable, "-c", "from gpuwaste.cli import main; main()", "generate"]
        cmd += ["--out", str(out), "--gpus", str(gpus), "--days", str(days)]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        subprocess.run(cmd, check=True, env=env, cwd=out.parent, stdout=subprocess.DEVNULL)
    return path


def _quoted(col: str) -> pl.Expr:
    return (
        pl.col(col).cast(pl.String).str.replace_all("\\\\", "\\\\\\\\").str.replace_all('"', '\\"')
    )


def _family(name: str, rows: pl.DataFrame, labels: dict[str, str], value: pl.Expr) -> list[str]:
    """One family's lines (series in order, then time): `labels` maps a label to a column."""
    parts: list[pl.Expr] = [pl.lit(f"{name}{{")]
    present = [(k, c) for k, c in labels.items() if c in rows.columns]
    for i, (label, col) in enumerate(present):
        sep = "," if i else ""
        parts += [pl.lit(f'{sep}{label}="'), _quoted(col), pl.lit('"')]
    parts += [pl.lit("} "), value.cast(pl.String), pl.lit(" "), pl.col("t").cast(pl.String)]
    keep = [c for _, c in present]
    ordered = rows.filter(value.is_not_null()).sort([*keep, "t"], nulls_last=True)
    lines = ordered.select(pl.concat_str(parts, ignore_nulls=True).alias("l"))["l"].to_list()
    return [f"# TYPE {name} gauge", *lines]


def _raw(s: Series, column: str) -> pl.Expr:
    """The stored column back in the series' own unit."""
    return pl.col(column) / s.scale if s.scale != 1.0 else pl.col(column)


def _labels(d: Dialect, gauge_job: bool = False) -> dict[str, str]:
    lb = d.labels
    out = {lb.host[0]: "host"} if lb.host else {lb.node_instance: "instance"}
    if lb.gpu:
        out[lb.gpu] = "gpu_text"
    if lb.minor:
        out[lb.minor] = "minor_text"
    if lb.uuid:
        out[lb.uuid] = "uuid"
    if lb.model:
        out[lb.model] = "gpu_model"
    if d.job.source == "label" and not gauge_job:
        out[d.job.labels[0]] = "job_id"
    return out


def write_dialect(
    d: Dialect, gpu: pl.DataFrame, node_lines: list[str], out: Path, gauge: bool
) -> None:
    """`gpu` (gpu_samples rows of the DCGM read) in dialect `d` as OpenMetrics text."""
    rows = gpu.with_columns(
        (pl.col("ts").dt.epoch("ms") / 1000).alias("t"),
        pl.col("gpu").cast(pl.String).alias("gpu_text"),
        pl.col("gpu_minor").cast(pl.String).alias("minor_text"),
        (pl.col("host") + ":9100").alias("instance"),
    )
    if d.gpu_is_job_local:  # slurm-job-exporter: a series per job, none where no job runs
        rows = rows.filter(pl.col("job_id").is_not_null())
    labels = _labels(d, gauge)
    lines: list[str] = []
    quantities: list[tuple[Series | None, str]] = [
        (d.util[0], "util"),
        (d.mem_used, "mem_used_mib"),
        (d.mem_total, "mem_total_mib"),
        (d.power, "power_w"),
        (d.tensor_active, "tensor_active"),
    ]
    for s, column in quantities:
        if s is not None:
            lines += _family(s.name, rows, labels, _raw(s, column))
    if d.info is not None:
        info = {d.labels.node_instance: "instance", d.info.on: "uuid"}
        info |= {d.info.gpu or "index": "gpu_text", d.info.model or "name": "gpu_model"}
        one = pl.col("t").is_not_null().cast(pl.Int64)  # 1 (a literal predicate trips polars)
        lines += _family(d.info.name, rows, info, one)
    if gauge and d.job.gauge is not None:
        job = pl.col("job_id").cast(pl.Int64, strict=False).fill_null(0)
        lines += _family(d.job.gauge.name, rows, labels, job)
    out.write_text("\n".join([*lines, *node_lines, "# EOF"]) + "\n")


def _node_lines(text: str) -> list[str]:
    return [
        ln for ln in text.splitlines() if ln.startswith(("node_", "# TYPE node_", "# HELP node_"))
    ]


def _timed(run: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    run()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpus", type=int, default=32)
    ap.add_argument("--days", type=float, default=0.5)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--work", type=Path, default=Path("/tmp/gpuwaste-bench-dialects"))
    args = ap.parse_args()
    work: Path = args.work
    export = _generate(work / f"export-{args.gpus}-{args.days}", args.gpus, args.days)
    text = export.read_text()
    gpu = gpu_rows(parse_text(text).series, PrometheusLabels(), source="bench").frame
    files: dict[str, Path] = {"dcgm": export}
    node = _node_lines(text)
    del text
    for d in DIALECTS:
        if d is DCGM:
            continue
        forms = [(d.name, False)] + ([(f"{d.name}-gauge", True)] if d.job.gauge else [])
        for label, gauge in forms:
            path = work / f"{label}.om"
            write_dialect(d, gpu, node, path, gauge)
            files[label] = path
    times: dict[str, list[float]] = {k: [] for k in files}
    written: dict[str, int] = {}
    mtime = datetime.now(UTC).timestamp()
    for _ in range(args.repeat):
        for label, path in files.items():
            os.utime(path, (mtime, mtime))
            data = work / "wh"
            shutil.rmtree(data, ignore_errors=True)
            settings = Settings(data_dir=data)
            result = None

            def run(path: Path = path, settings: Settings = settings) -> None:
                nonlocal result
                result = ingest_openmetrics(settings, ClusterConfig(name="c"), path)

            times[label].append(_timed(run))
            assert result is not None
            written[label] = result.written.get("gpu_samples", 0)
    base = statistics.median(times["dcgm"])
    print(
        f"{args.gpus} GPUs x {args.days} days, {gpu.height:,} GPU rows read from DCGM; median of {args.repeat}"
    )
    print("| dialect | file MB | seconds | x dcgm | gpu_samples written |")
    print("| --- | --- | --- | --- | --- |")
    for label, path in files.items():
        t = statistics.median(times[label])
        mb = path.stat().st_size / 1e6
        print(f"| {label} | {mb:,.0f} | {t:.2f} | {t / base:.2f} | {written[label]:,} |")


if __name__ == "__main__":
    main()
