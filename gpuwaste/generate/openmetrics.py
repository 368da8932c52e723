"""OpenMetrics text for `promtool tsdb create-blocks-from openmetrics`.

Layout: one block per metric family (`# HELP`, `# TYPE`, then every sample of the family); inside
a family, one block per series with its samples in strictly increasing time; timestamps are
integer epoch seconds; the file ends with `# EOF`.

DCGM series look like dcgm-exporter in HPC mode: while a GPU is allocated its series carry
`hpc_job="<JobIDRaw>"`, so a GPU that runs job A then job B has a series for A, one for B and
one without `hpc_job` for the unallocated time. Samples inside a data gap are absent.

The counter is written the OpenMetrics way: `# TYPE node_cpu_seconds counter` and samples named
`node_cpu_seconds_total`. promtool 2.42 also accepts `# TYPE node_cpu_seconds_total counter`
(the Prometheus text-format habit) and stores the same series either way.
"""

from __future__ import annotations

from typing import TextIO

import numpy as np

from gpuwaste.dialects import dialect
from gpuwaste.generate import params
from gpuwaste.generate.mig import MigWriter
from gpuwaste.generate.model import Cluster, Window
from gpuwaste.generate.telemetry import families, gpu_series, pick

CPU_MODES = ("idle", "iowait", "system", "user")
# share of busy CPU time per mode (user, system, iowait)
BUSY_SPLIT = {"user": 0.8, "system": 0.15, "iowait": 0.05}


def _series(
    fh: TextIO, prefix: str, values: list[str] | tuple[str, ...], stamps: tuple[str, ...]
) -> None:
    """Write `prefix value stamp` lines; prefix ends with '} ', values with ' ', stamps with '\\n'."""
    if values:
        fh.write(prefix)
        fh.write(prefix.join(map(str.__add__, values, stamps)))


def write_openmetrics(
    cluster: Cluster,
    fh: TextIO,
    win: Window,
    host_cpu: np.ndarray,
    host_mem: np.ndarray,
    mig: MigWriter | None = None,
) -> dict[str, int]:
    """Write a window that starts at the window start (counters accumulate from it); returns
    the number of samples written per family. `mig` adds the MIG hosts' series (whole window)."""
    spec = cluster.spec
    if win.k0 != 0:
        raise ValueError("write_openmetrics needs a window starting at sample 0")
    n = win.k1 - win.k0
    stamps = [f"{spec.t0 + (win.k0 + k) * spec.interval_s}\n" for k in range(n)]
    counts: dict[str, int] = {}
    d = dialect(spec.telemetry)
    for fam in families(d, sm=spec.busy_loops > 0):
        fh.write(f"# HELP {fam.name} {fam.help}\n# TYPE {fam.name} gauge\n")
        written = 0
        for g in range(spec.n_gpus):
            for labels, idx, values in gpu_series(cluster, win, d, fam, g):
                il = idx.tolist()
                texts = [values] * len(il) if isinstance(values, str) else values
                _series(fh, f"{fam.name}{{{labels}}} ", texts, tuple(pick(stamps, il)))
                written += len(il)
        if mig is not None:
            written += mig.family(fh, fam.name)
        counts[fam.name] = written
    if mig is not None:
        counts.update(mig.new_families(fh))

    # node exporter
    n_hosts = spec.n_hosts
    dt = spec.interval_s
    fh.write("# HELP node_cpu_seconds Seconds the CPUs spent in each mode.\n")
    fh.write("# TYPE node_cpu_seconds counter\n")
    written = 0
    for h in range(n_hosts):
        host = cluster.hosts[h]
        u = host_cpu[h] / 100.0
        incs = {
            "idle": dt * (1.0 - u),
            **{m: dt * u * share for m, share in BUSY_SPLIT.items()},
        }
        uptime = 86400.0 * (3 + (h * 37 + spec.seed) % 40)  # seconds since boot at t0
        base = {"idle": 0.9 * uptime, "user": 0.08 * uptime, "system": 0.015 * uptime}
        base["iowait"] = 0.005 * uptime
        for cpu in range(params.HOST_CPUS_EXPORTED):
            for mode in CPU_MODES:
                vals = base[mode] + np.cumsum(incs[mode])
                prefix = (
                    f'node_cpu_seconds_total{{cpu="{cpu}",instance="{host.name}:9100",'
                    f'job="node",mode="{mode}"}} '
                )
                strs = [f"{v:.2f} " for v in vals.tolist()]
                _series(fh, prefix, strs, tuple(stamps))
                written += n
    counts["node_cpu_seconds_total"] = written

    total = params.HOST_MEM_BYTES
    fh.write("# HELP node_memory_MemTotal_bytes Memory information field MemTotal_bytes.\n")
    fh.write("# TYPE node_memory_MemTotal_bytes gauge\n")
    for h in range(n_hosts):
        prefix = (
            f'node_memory_MemTotal_bytes{{instance="{cluster.hosts[h].name}:9100",job="node"}} '
        )
        _series(fh, prefix, [f"{total} "] * n, tuple(stamps))
    counts["node_memory_MemTotal_bytes"] = n_hosts * n
    fh.write("# HELP node_memory_MemAvailable_bytes Memory information field MemAvailable_bytes.\n")
    fh.write("# TYPE node_memory_MemAvailable_bytes gauge\n")
    for h in range(n_hosts):
        avail = mem_available_bytes(host_mem[h])
        prefix = (
            f'node_memory_MemAvailable_bytes{{instance="{cluster.hosts[h].name}:9100",job="node"}} '
        )
        _series(fh, prefix, [f"{v} " for v in avail.tolist()], tuple(stamps))
    counts["node_memory_MemAvailable_bytes"] = n_hosts * n
    fh.write("# EOF\n")
    return counts


def mem_available_bytes(used_frac: np.ndarray) -> np.ndarray:
    """MemAvailable in bytes (a multiple of 4 KiB) from the used fraction."""
    pages = np.floor(params.HOST_MEM_BYTES * (1.0 - used_frac) / 4096.0)
    return (pages * 4096).astype(np.int64)
