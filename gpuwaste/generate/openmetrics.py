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

from operator import itemgetter
from typing import TextIO

import numpy as np

from gpuwaste.generate import params
from gpuwaste.generate.mig import MigWriter
from gpuwaste.generate.model import Cluster, Window

# PCI bus ids of the eight GPUs of a DGX A100, for the pci_bus_id label
PCI_BUS = ("07", "0F", "47", "4E", "87", "90", "B7", "BD")

DCGM_FAMILIES = (
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", "gauge"),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", "gauge"),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", "gauge"),
)
CPU_MODES = ("idle", "iowait", "system", "user")
# share of busy CPU time per mode (user, system, iowait)
BUSY_SPLIT = {"user": 0.8, "system": 0.15, "iowait": 0.05}


def _pick(table: list[str], idx: list[int]) -> tuple[str, ...]:
    if not idx:
        return ()
    got = itemgetter(*idx)(table)
    return got if isinstance(got, tuple) else (got,)


def _series(
    fh: TextIO, prefix: str, values: list[str] | tuple[str, ...], stamps: tuple[str, ...]
) -> None:
    """Write `prefix value stamp` lines; prefix ends with '} ', values with ' ', stamps with '\\n'."""
    if values:
        fh.write(prefix)
        fh.write(prefix.join(map(str.__add__, values, stamps)))


def gpu_labels(cluster: Cluster, g: int) -> str:
    host = cluster.host_of(g)
    i = g % params.GPUS_PER_HOST
    return (
        f'gpu="{i}",UUID="{host.uuids[i]}",pci_bus_id="00000000:{PCI_BUS[i]}:00.0",'
        f'device="nvidia{i}",modelName="{params.MODEL_NAME}",Hostname="{host.name}"'
    )


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
    small = [f"{v} " for v in range(101)]
    big = [f"{v} " for v in range(spec.gpu_mem_mib + 1)]
    counts: dict[str, int] = {}
    job_ids = [j.job_id for j in cluster.jobs]

    for family, help_text, kind in DCGM_FAMILIES:
        fh.write(f"# HELP {family} {help_text}\n# TYPE {family} {kind}\n")
        written = 0
        for g in range(spec.n_gpus):
            labels = gpu_labels(cluster, g)
            if family == "DCGM_FI_DEV_GPU_UTIL":
                values, table = win.util[g], small
            elif family == "DCGM_FI_DEV_FB_USED":
                values, table = win.mem[g], big
            else:
                values, table = spec.gpu_mem_mib - win.mem[g], big
            jobs_row = win.job[g]
            present = win.present[g]
            for key in _series_keys(jobs_row):
                idx = np.nonzero((jobs_row == key) & present)[0]
                if key >= 0:
                    prefix = f'{family}{{{labels},hpc_job="{job_ids[key]}"}} '
                else:
                    prefix = f"{family}{{{labels}}} "
                il = idx.tolist()
                _series(fh, prefix, _pick(table, values[idx].tolist()), _pick(stamps, il))
                written += len(il)
        if mig is not None:
            written += mig.family(fh, family)
        counts[family] = written
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


def _series_keys(jobs_row: np.ndarray) -> list[int]:
    """The series of one GPU in order of first appearance: job indices, -1 for unallocated."""
    if jobs_row.size == 0:
        return []
    change = np.nonzero(np.diff(jobs_row))[0] + 1
    firsts = jobs_row[np.concatenate(([0], change))].tolist()
    seen: dict[int, None] = {}
    for k in firsts:
        seen.setdefault(int(k), None)
    return list(seen)
