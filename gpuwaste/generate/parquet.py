"""write_samples_parquet: the gpu_samples rows straight to parquet, one day at a time.

out_dir/date=YYYY-MM-DD/part-0.parquet (UTC dates), columns host (string), gpu (int16),
ts (timestamp[us, UTC]), util, mem_used_mib, mem_total_mib, power_w (float64, generate/power.py),
job_id (string, null when
unallocated), sorted by host, gpu, ts. Samples inside data gaps are absent. Memory is bounded by
one day of samples.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from gpuwaste.generate import params
from gpuwaste.generate.model import Cluster, GeneratorSpec
from gpuwaste.generate.power import power_w
from gpuwaste.generate.series import gpu_window
from gpuwaste.generate.simulate import simulate

SCHEMA = pa.schema(
    [
        ("host", pa.string()),
        ("gpu", pa.int16()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("util", pa.float64()),
        ("mem_used_mib", pa.float64()),
        ("mem_total_mib", pa.float64()),
        ("power_w", pa.float64()),
        ("job_id", pa.string()),
    ]
)


def day_bounds(spec: GeneratorSpec) -> list[tuple[str, int, int]]:
    """(date, k0, k1): sample ranges of the UTC days the window touches."""
    out = []
    k = 0
    n = spec.n_samples
    dt = spec.interval_s
    while k < n:
        t = spec.t0 + k * dt
        day = datetime.fromtimestamp(t, UTC).date()
        next_midnight = int(datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp()) + 86400
        k1 = min(n, -(-(next_midnight - spec.t0) // dt))
        out.append((day.isoformat(), k, k1))
        k = k1
    return out


def day_table(cluster: Cluster, k0: int, k1: int) -> pa.Table:
    spec = cluster.spec
    win = gpu_window(cluster, k0, k1)
    g_n, w = win.util.shape
    present = win.present.reshape(-1)
    gpu_global = np.repeat(np.arange(g_n, dtype=np.int32), w)[present]
    ts = (spec.t0 + (k0 + np.tile(np.arange(w, dtype=np.int64), g_n)) * spec.interval_s)[present]
    host_names = pa.array([h.name for h in cluster.hosts], type=pa.string())
    job_names = pa.array([j.job_id for j in cluster.jobs], type=pa.string())
    job = win.job.reshape(-1)[present]
    job_idx = pa.array(job, type=pa.int32(), mask=job < 0)
    n = int(present.sum())
    return pa.table(
        {
            "host": host_names.take(pa.array(gpu_global // params.GPUS_PER_HOST)),
            "gpu": pa.array((gpu_global % params.GPUS_PER_HOST).astype(np.int16)),
            "ts": pa.array(ts * 1_000_000, type=pa.int64()).cast(pa.timestamp("us", tz="UTC")),
            "util": pa.array(win.util.reshape(-1)[present].astype(np.float64)),
            "mem_used_mib": pa.array(win.mem.reshape(-1)[present].astype(np.float64)),
            "mem_total_mib": pa.array(np.full(n, float(spec.gpu_mem_mib))),
            "power_w": pa.array(power_w(win.util, win.mem).reshape(-1)[present].astype(np.float64)),
            "job_id": job_names.take(job_idx),
        },
        schema=SCHEMA,
    )


def write_samples_parquet(spec: GeneratorSpec, out_dir: Path) -> None:
    """Simulate, then write one parquet file per UTC day of the window."""
    if spec.busy_loops:  # the rows have one utilization: no coarse metric to plant them in
        raise ValueError("busy loops are written in the exporter's text (write_all) only")
    cluster = simulate(spec)
    out_dir = Path(out_dir)
    for date, k0, k1 in day_bounds(spec):
        part = out_dir / f"date={date}"
        part.mkdir(parents=True, exist_ok=True)
        table = day_table(cluster, k0, k1)
        tmp = part / "part-0.parquet.tmp"
        pq.write_table(table, tmp, compression="zstd")
        tmp.replace(part / "part-0.parquet")
        del table
