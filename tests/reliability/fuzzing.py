"""How many generated inputs each fuzz test runs."""

from __future__ import annotations

import os

from harness.components import in_ci
from hypothesis import HealthCheck, settings

# 2,000 per parser under CI (CI=true, as `make test` runs there), 500 in a developer's quick run,
# and as many as asked for with GPUWASTE_FUZZ_EXAMPLES (`make fuzz` asks for 200,000). The inputs
# are derandomized, the same each run: CI's 2,000 reach about the parser lines that 10,000 did
# (counts: docs/reliability.md#bad-input-fuzzing) in a fifth of the time; `make fuzz` goes further.
CI_EXAMPLES = 2000
FUZZ_EXAMPLES = int(
    os.environ.get("GPUWASTE_FUZZ_EXAMPLES", str(CI_EXAMPLES) if in_ci() else "500")
)

fuzz_settings = settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    derandomize=os.environ.get("GPUWASTE_FUZZ_RANDOM", "") == "",
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)
