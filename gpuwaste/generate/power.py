"""Planted power and energy: a GPU's power as a function of what it does, its energy counter, and
the energy each allocation used and lost is in the truth (truth.py's `energy_truth`).

The model's power (whole watts, so the exporters' texts and the truth agree exactly):
- idle, no memory held: `IDLE_W` (the GPU's idle power);
- no kernel but memory held (a process holds a context and memory): `HELD_W`, 3.5 x idle;
- busy at utilization u: idle + (LOADED_W - idle) x u / 100;
- a busy loop's samples (generate/busy_loops.py: memory held, a tiny kernel always running):
  `HELD_W` + (LOADED_W - idle) x u / 100, u being its real work (1-2 %).

Per sample, the power stands for the interval before it (as the analyses weigh samples), so a
sample's energy is power x interval. The DCGM energy counter (mJ since boot) starts at a
per-GPU uptime's worth and adds each sample's energy at the sample; on `RESET_GPU` it restarts
from 0 at `RESET_AT` of the window (a reboot: the sample there reads that sample's energy only).
"""

from __future__ import annotations

import numpy as np

from gpuwaste.generate.model import F64, Cluster, GeneratorSpec

IDLE_W = 60  # an idle A100-SXM4-80GB (no context): 50-70 W as nvidia-smi reports it
HELD_W = 210  # 3.5 x idle: memory held, no kernel running
LOADED_W = 400  # the A100-SXM4's power limit, at 100 % utilization
RESET_GPU = 0  # the global GPU whose counter resets once in the window
RESET_AT = 0.5  # ... at this fraction of the window's samples
KWH = 3.6e6  # J


def power_w(util: np.ndarray, mem: np.ndarray, loop: np.ndarray | None = None) -> np.ndarray:
    """Power (int W) of samples with utilization `util` (0-100) and memory used `mem` (MiB);
    `loop` (bool, same shape) marks a busy loop's samples (None: none)."""
    work = np.rint((LOADED_W - IDLE_W) * util.astype(np.float64) / 100.0)
    out = np.where(util > 0, IDLE_W + work, np.where(mem > 0, HELD_W, IDLE_W))
    if loop is not None:
        out = np.where(loop, HELD_W + work, out)
    return out.astype(np.int64)


def reset_sample(spec: GeneratorSpec) -> int | None:
    """The sample of the window at which `RESET_GPU`'s counter restarts from 0 (None: the window
    is too short for one)."""
    r = int(spec.n_samples * RESET_AT)
    return r if 0 < r < spec.n_samples else None


def counter_j(cluster: Cluster, g: int, power: np.ndarray) -> F64:
    """The energy counter (J) of global GPU `g` at each sample of the window, from its power at
    each sample (all samples, present or not: the counter counts through data gaps)."""
    spec = cluster.spec
    uptime_s = 86400.0 * (2 + (g * 31 + spec.seed) % 20)
    counts = np.cumsum(power.astype(np.float64) * spec.interval_s)
    base = uptime_s * IDLE_W
    if g != RESET_GPU:
        return base + counts
    r = reset_sample(spec)
    out = base + counts
    if r is not None:
        out[r:] = counts[r:] - counts[r - 1]
    return out


__all__ = [
    "HELD_W",
    "IDLE_W",
    "KWH",
    "LOADED_W",
    "RESET_GPU",
    "counter_j",
    "power_w",
    "reset_sample",
]
