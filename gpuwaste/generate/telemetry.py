"""The GPU exporter's series of one telemetry dialect, from its declaration in gpuwaste/dialects.py.

The same cluster in every dialect: the same utilization and memory samples, written in the
dialect's metric names, units and labels (nothing here names a metric). Per dialect:

- utilization: the dialect's device-level series (the last in its order of preference: DCGM's
  `DCGM_FI_DEV_GPU_UTIL`), percent as an integer, or a ratio (`0.37`) where its scale is 100;
- memory used in the dialect's unit, and the total (or DCGM's free memory);
- labels: the GPU index, the device minor number (`device="nvidia2"`, `minor_number="2"`), the
  uuid and model where the dialect has a label for them; the host in its host label, else in
  `instance="<host>:<exporter port>"` beside a scrape `job` label, as Prometheus adds them;
- the job: in the dialect's job label while the GPU is allocated (one series per job and GPU,
  and one without the label for the unallocated time); slurm-job-exporter writes series only
  while a job runs, with `gpu` the index among the job's GPUs on that host; a companion job
  gauge (Jobstats' `nvidia_gpu_jobId`, value = job id, 0 when free) beside the label, or alone
  with `job_labels=False` (older Jobstats); an info series (`nvidia_smi_gpu_info`, value 1)
  giving the index and model the value series lack;
- `job_labels=False` for a dialect without a job gauge (DCGM's default: no `hpc_job`), and a
  dialect that never names the job (nvidia-smi): one series per GPU, and the scontrol captures
  (gpuwaste/generate/scontrol.py) tie jobs to GPUs.

Samples inside a data gap are absent from every family of the GPU exporter.

Power (where the dialect declares it) in whole watts of the model in generate/power.py, in the
dialect's unit; the energy counter (where it declares one) counts that power through data gaps,
with one reset (generate/power.py).

With busy loops (generate/busy_loops.py), the utilization series reads 100 on a busy loop's
samples, and the dialect's SM-activity series (where it declares one) is written beside it for
every GPU, with the samples' real work.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from operator import itemgetter

import numpy as np

from gpuwaste.dialects import Dialect, Series, dialect
from gpuwaste.generate import busy_loops, params
from gpuwaste.generate.model import Cluster, GeneratorSpec, Window
from gpuwaste.generate.power import LOADED_W, counter_j, power_w

# PCI bus ids of the eight GPUs of a DGX A100, for DCGM's pci_bus_id label
PCI_BUS = ("07", "0F", "47", "4E", "87", "90", "B7", "BD")
# The exporters' default ports, for the `instance` label Prometheus adds where the series carry
# no host label of their own.
EXPORTER_PORT = {
    "dcgm": 9400,
    "jobstats": 9445,
    "slurm-job-exporter": 9798,
    "nvidia-smi": 9835,
    "amd": 5000,
}

Quantity = str  # "util", "sm", "used", "free", "total", "power", "energy", "job_gauge", "info"


def names_job(spec: GeneratorSpec) -> bool:
    """Whether the GPU series (or a companion gauge) name the job."""
    d = dialect(spec.telemetry)
    if d.job.source == "none":
        return False
    return spec.job_labels or d.job.gauge is not None


@dataclass(frozen=True)
class Family:
    name: str
    help: str
    quantity: Quantity


def families(d: Dialect, sm: bool = False) -> list[Family]:
    """The GPU families written for dialect `d`, in file order; `sm`: with its SM-activity
    family (where it has one), as the busy loops need."""
    out = [Family(d.util[-1].name, f"GPU utilization ({d.title}).", "util")]
    if sm and d.sm_active is not None:
        out.append(Family(d.sm_active.name, f"SM activity ({d.title}).", "sm"))
    out.append(Family(d.mem_used.name, f"GPU memory used ({d.title}).", "used"))
    if d.mem_total is not None:
        out.append(Family(d.mem_total.name, f"GPU memory total ({d.title}).", "total"))
    elif d.mem_free is not None:
        out.append(Family(d.mem_free.name, f"GPU memory free ({d.title}).", "free"))
    if d.power is not None:
        out.append(Family(d.power.name, f"GPU power draw ({d.title}).", "power"))
    if d.energy is not None:
        out.append(Family(d.energy.name, f"GPU energy counter ({d.title}).", "energy"))
    if d.job.gauge is not None:
        out.append(Family(d.job.gauge.name, "Job running on this GPU (0: none).", "job_gauge"))
    if d.info is not None:
        out.append(Family(d.info.name, f"GPU information ({d.title}).", "info"))
    return out


def _raw(series: Series, value: int) -> str:
    """A value in the stored unit (percent, MiB) as the exporter writes it."""
    factor = 1.0 / series.scale
    if float(factor).is_integer():
        return str(value * int(factor))
    return f"{value * factor:g}"


class Tables:
    """The value strings of one dialect, by stored value (percent 0-100, MiB 0-capacity)."""

    def __init__(self, d: Dialect, spec: GeneratorSpec) -> None:
        util = d.util[-1]
        self.util = [f"{_raw(util, v)} " for v in range(101)]
        cap = spec.gpu_mem_mib
        self.used = [f"{_raw(d.mem_used, v)} " for v in range(cap + 1)]
        free = d.mem_free if d.mem_free is not None else d.mem_used
        self.free = [f"{_raw(free, cap - v)} " for v in range(cap + 1)]
        total = d.mem_total if d.mem_total is not None else d.mem_used
        self.total = f"{_raw(total, cap)} "
        self.power = [f"{_raw(d.power, v)} " for v in range(LOADED_W + 1)] if d.power else []
        sm = d.sm_active
        self.sm = [f"{_raw(sm, v)} " for v in range(101)] if sm is not None else []


def gpu_label_pairs(d: Dialect, cluster: Cluster, g: int) -> list[tuple[str, str]]:
    """The labels of GPU `g` (global index) on every series of the dialect, but the job's."""
    host = cluster.host_of(g)
    i = g % params.GPUS_PER_HOST
    lab = d.labels
    pairs: list[tuple[str, str]] = []
    if lab.gpu is not None and not d.gpu_is_job_local:
        pairs.append((lab.gpu, str(i)))
    if lab.uuid is not None:
        pairs.append((lab.uuid, host.uuids[i]))
    if d.name == "dcgm":
        pairs.append(("pci_bus_id", f"00000000:{PCI_BUS[i]}:00.0"))
    if lab.minor is not None:
        pairs.append((lab.minor, f"{lab.minor_prefix}{host.minors[i]}"))
    if lab.model is not None:
        pairs.append((lab.model, params.MODEL_NAME))
    pairs.extend(host_label_pairs(d, host.name))
    return pairs


def host_label_pairs(d: Dialect, host: str) -> list[tuple[str, str]]:
    if d.labels.host:
        return [(d.labels.host[0], host)]
    return [("instance", f"{host}:{EXPORTER_PORT[d.name]}"), ("job", d.name)]


def info_label_pairs(d: Dialect, cluster: Cluster, g: int) -> list[tuple[str, str]]:
    assert d.info is not None
    host = cluster.host_of(g)
    i = g % params.GPUS_PER_HOST
    pairs = []
    if d.info.gpu is not None:
        pairs.append((d.info.gpu, str(i)))
    if d.info.model is not None:
        pairs.append((d.info.model, params.MODEL_NAME))
    pairs.append((d.info.on, host.uuids[i]))
    return pairs + host_label_pairs(d, host.name)


def text(pairs: list[tuple[str, str]]) -> str:
    return ",".join(f'{k}="{v}"' for k, v in pairs)


def local_index(cluster: Cluster) -> Callable[[int, int], int]:
    """(job index, global GPU) -> the GPU's index among the job's GPUs on its host."""
    table: dict[tuple[int, int], int] = {}
    for job in cluster.jobs:
        per_host: dict[int, list[int]] = {}
        for h, i in job.alloc:
            per_host.setdefault(h, []).append(i)
        for h, idx in per_host.items():
            for rank, i in enumerate(sorted(idx)):
                table[(job.index, h * params.GPUS_PER_HOST + i)] = rank
    return lambda job, g: table[(job, g)]


def series_keys(jobs_row: np.ndarray) -> list[int]:
    """The series of one GPU in order of first appearance: job indices, -1 for unallocated."""
    if jobs_row.size == 0:
        return []
    change = np.nonzero(np.diff(jobs_row))[0] + 1
    firsts = jobs_row[np.concatenate(([0], change))].tolist()
    seen: dict[int, None] = {}
    for k in firsts:
        seen.setdefault(int(k), None)
    return list(seen)


def gpu_series(
    cluster: Cluster, win: Window, d: Dialect, family: Family, g: int
) -> list[tuple[str, np.ndarray, list[str] | str]]:
    """The series of GPU `g` in one family: (label text, sample positions, value strings by
    position or one string for all)."""
    spec = cluster.spec
    tables = _tables(cluster, d)
    jobs_row = win.job[g]
    present = win.present[g]
    job_ids = [j.job_id for j in cluster.jobs]
    if family.quantity == "info":
        return [(text(info_label_pairs(d, cluster, g)), np.nonzero(present)[0], "1 ")]
    base = gpu_label_pairs(d, cluster, g)
    if family.quantity == "job_gauge":
        idx = np.nonzero(present)[0]
        ids = [f"{j} " for j in job_ids] + ["0 "]  # index -1: no job
        values = pick(ids, jobs_row[idx].tolist())
        return [(text(base), idx, values)]
    table: list[str] | str
    values_row: np.ndarray | None
    if family.quantity == "util":
        table, values_row = tables.util, busy_loops.coarse_util(cluster, win.util[g], jobs_row)
    elif family.quantity == "sm":
        table, values_row = tables.sm, win.util[g]
    elif family.quantity == "used":
        table, values_row = tables.used, win.mem[g]
    elif family.quantity == "free":
        table, values_row = tables.free, win.mem[g]
    elif family.quantity == "power":
        loop = busy_loops.loop_mask(cluster, jobs_row)
        table, values_row = tables.power, power_w(win.util[g], win.mem[g], loop)
    elif family.quantity == "energy":
        assert d.energy is not None and win.k0 == 0
        loop = busy_loops.loop_mask(cluster, jobs_row)
        joules = counter_j(cluster, g, power_w(win.util[g], win.mem[g], loop))
        table, values_row = [f"{v / d.energy.scale:.0f} " for v in joules.tolist()], None
    else:
        table, values_row = tables.total, win.mem[g]
    by_job = d.job.source == "label" and spec.job_labels
    keys = series_keys(jobs_row) if by_job else [-1]
    out: list[tuple[str, np.ndarray, list[str] | str]] = []
    local = _local(cluster) if d.gpu_is_job_local else None
    for key in keys:
        mask = (jobs_row == key) & present if by_job else present
        idx = np.nonzero(mask)[0]
        if key < 0 and d.gpu_is_job_local:
            continue  # a per-job exporter has no series for a GPU no job holds
        pairs = list(base)
        if local is not None:
            assert d.labels.gpu is not None
            pairs.insert(0, (d.labels.gpu, str(local(key, g))))
        if key >= 0:
            pairs.append((d.job.labels[0], job_ids[key]))
        if isinstance(table, str):
            out.append((text(pairs), idx, table))
        elif values_row is None:  # one string per sample (a counter)
            out.append((text(pairs), idx, pick(table, idx.tolist())))
        else:
            out.append((text(pairs), idx, pick(table, values_row[idx].tolist())))
    return out


def pick(table: list[str], idx: list[int]) -> list[str]:
    if not idx:
        return []
    got = itemgetter(*idx)(table)
    return list(got) if isinstance(got, tuple) else [got]


def _tables(cluster: Cluster, d: Dialect) -> Tables:
    key = f"tables:{d.name}"
    got = cluster.cache.get(key)
    if not isinstance(got, Tables):
        got = Tables(d, cluster.spec)
        cluster.cache[key] = got
    return got


def _local(cluster: Cluster) -> Callable[[int, int], int]:
    got = cluster.cache.get("local_index")
    if got is None:
        got = local_index(cluster)
        cluster.cache["local_index"] = got
    return got  # type: ignore[return-value]
