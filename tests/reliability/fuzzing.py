"""How many generated inputs each fuzz test runs: 10,000 by default (CI), more for `make fuzz`."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

FUZZ_EXAMPLES = int(os.environ.get("GPUWASTE_FUZZ_EXAMPLES", "10000"))

fuzz_settings = settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    derandomize=os.environ.get("GPUWASTE_FUZZ_RANDOM", "") == "",
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)
