"""`gpuwaste demo`: the bundled sample -> warehouse -> analyses -> summary -> dashboard.

The sample (`sample_data/demo/`) was made by `gpuwaste generate` (see sample_data/README.md). It
goes through the same ingestors an operator uses: the DCGM/node-exporter OpenMetrics file through
the `openmetrics` source, `sacct.txt` through the `slurm` source (cluster `demo`), and the Philly
format files through the `philly` source (cluster `philly-sample`). No server is needed.
"""

from __future__ import annotations

import os
from pathlib import Path

import polars as pl

from gpuwaste.config import (
    ClusterConfig,
    OpenMetricsSource,
    PhillySource,
    Settings,
    SlurmSource,
)
from gpuwaste.errors import GpuwasteError

# The headline utilization (docs/analyses.md, "GPU utilization"), named alike everywhere.
UTIL_NAME = "GPU utilization (time-weighted mean)"

SAMPLE_ENV = "GPUWASTE_SAMPLE_DIR"
DEMO_CLUSTER = "demo"
PHILLY_CLUSTER = "philly-sample"


def sample_dir() -> Path:
    """The bundled sample: `$GPUWASTE_SAMPLE_DIR`, else `sample_data/demo` beside the package."""
    if os.environ.get(SAMPLE_ENV):
        return Path(os.environ[SAMPLE_ENV])
    return Path(__file__).resolve().parent.parent / "sample_data" / "demo"


def demo_settings(data_dir: Path, sample: Path) -> Settings:
    metrics = sample / "metrics.om.gz"
    if not metrics.exists():
        metrics = sample / "metrics.om"
    for needed in (metrics, sample / "sacct.txt", sample / "philly"):
        if not needed.exists():
            raise GpuwasteError(
                f"the bundled sample is incomplete: {needed} is missing "
                "(regenerate it with `make sample`)."
            )
    return Settings(
        data_dir=data_dir,
        clusters=[
            ClusterConfig(
                name=DEMO_CLUSTER,
                openmetrics=OpenMetricsSource(file=metrics),
                slurm=SlurmSource(file=sample / "sacct.txt"),
            ),
            ClusterConfig(
                name=PHILLY_CLUSTER,
                philly=PhillySource(dir=sample / "philly"),
            ),
        ],
    )


def summary_lines(data_dir: Path) -> list[str]:
    """A short, plain-text summary of where the GPU hours went, per cluster."""
    from gpuwaste.warehouse.catalog import connect
    from gpuwaste.warehouse.reading import read_frame, read_rows
    from gpuwaste.warehouse.results import ALL_MODELS, ALL_VCS

    con = connect(data_dir)
    df = read_frame(
        con,
        """
        with jobs as (select cluster, count(*) as jobs from job_usage group by cluster),
        hours as (
            select cluster,
                   sum(alloc_gpu_h) as gpu_h,
                   sum(observed_gpu_h) as observed_h,
                   sum(util_gpu_h) as util_h,
                   sum(idle_slot_gpu_h) as idle_slot_h,
                   sum(never_used_gpu_h) as never_used_h,
                   sum(debug_gpu_h) as debug_h
            from waste_daily where vc = ? and gpu_model = ? group by cluster
        )
        select * from jobs left join hours using (cluster) order by cluster
        """,
        [ALL_VCS, ALL_MODELS],
    )
    lines = []

    def pct(part: float | None, whole: float | None) -> float:
        return 100.0 * (part or 0.0) / whole if whole else 0.0

    for r in df.iter_rows(named=True):
        gpu_h = r["gpu_h"] or 0.0
        lines.append(
            f"{r['cluster']}: {r['jobs']} jobs, {gpu_h:,.0f} GPU hours allocated; "
            f"{UTIL_NAME} {pct(r['util_h'], r['observed_h']):.0f}%; "
            f"{pct(r['idle_slot_h'], gpu_h):.0f}% in idle slots, "
            f"{pct(r['never_used_h'], gpu_h):.0f}% on never-used GPUs, "
            f"{pct(r['debug_h'], gpu_h):.0f}% held by debugging jobs"
        )
    quarantined = read_rows(con, "select count(*) from quarantine")[0][0]
    lines.append(f"quarantined input records: {quarantined} (see the `quarantine` table)")
    return lines


def run_demo(data_dir: Path, *, serve: bool, port: int, host: str) -> pl.DataFrame | None:
    from gpuwaste.analyses.run import analyze
    from gpuwaste.ingest.run import run_configured
    from gpuwaste.ingest.sources import SOURCES

    sample = sample_dir()
    settings = demo_settings(data_dir, sample)
    print(f"gpuwaste demo: sample {sample} -> warehouse {data_dir}")
    run_configured(settings, SOURCES)
    analyze(settings)
    for line in summary_lines(data_dir):
        print("  " + line)
    # The roll-up rows only: the summaries are split by GPU model, so `select *` repeats each VC.
    query = "select * from waste_by_vc where gpu_model = '(all)'"
    print(f'ad hoc SQL: gpuwaste sql --data-dir {data_dir} "{query}"')
    if serve:
        from gpuwaste.dashboard.cli import serve as serve_dashboard

        print(f"dashboard: http://{host}:{port}  (Ctrl-C to stop)")
        serve_dashboard(data_dir, host, port)
    return None
