"""The generated cluster lands near the published Philly marginals (Jeon et al., ATC 2019).

One 256-GPU, 2-day cluster (about 5,000 jobs, 3 M GPU samples). Tolerances come from running
seeds 0-5: the spread across seeds is about +-1 point for the state shares, +-0.1 for the mean
job size (a handful of 32/64-GPU jobs move it), +-1 minute for the median run time and +-3 points
for the zero-utilization share; the bounds below are about twice that spread.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from gpuwaste.generate import GeneratorSpec, simulate
from gpuwaste.generate.series import gpu_window


def test_marginals_match_philly() -> None:
    cluster = simulate(GeneratorSpec(seed=0, gpus=256, days=2.0))
    jobs = cluster.jobs
    finished = [j for j in jobs if j.state != "running"]
    share = {k: v / len(finished) for k, v in Counter(j.state for j in finished).items()}
    # final status: 60.4 % passed, 9.0 % killed, 30.5 % unsuccessful
    assert abs(share["passed"] - 0.604) < 0.03
    assert abs(share["killed"] - 0.090) < 0.02
    assert abs(share["unsuccessful"] - 0.305) < 0.03
    raw = Counter(j.raw_state.split()[0] for j in finished)
    assert {"FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"} <= set(raw)
    # about 1.93 GPUs per job
    assert abs(float(np.mean([j.gpus for j in jobs])) - 1.93) < 0.2
    # median run time near 15 minutes, with a long tail up to many hours
    runtimes = np.array([j.end - j.start for j in finished if j.ran and j.end is not None]) / 60
    assert 12 <= float(np.median(runtimes)) <= 18
    assert float(np.percentile(runtimes, 99)) > 8 * 60
    # queueing is real: some jobs wait
    waits = np.array([j.start - j.submit for j in jobs if j.ran])
    assert (waits > 600).mean() > 0.01
    # about a third of allocated GPU time at 0 % utilization; busy time has a median near 50 %
    win = gpu_window(cluster)
    util = win.util[(win.job >= 0) & win.present]
    assert 0.27 <= float((util == 0).mean()) <= 0.40
    assert 44 <= float(np.median(util[util > 0])) <= 56
