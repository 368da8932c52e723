"""One real Prometheus, backfilled with the synthetic cluster of faults.SPEC, for the session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from harness.prometheus import (
    PrometheusServer,
    running_prometheus,
    write_synthetic_openmetrics,
)

from tests.reliability.faults import SPEC


@pytest.fixture(scope="session")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    tmp = tmp_path_factory.mktemp("served")
    write_synthetic_openmetrics(SPEC, tmp / "metrics.om")
    with running_prometheus(tmp / "metrics.om", tmp / "prom") as server:
        yield server
