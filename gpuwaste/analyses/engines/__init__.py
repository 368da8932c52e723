"""Engines run the batches of one cluster's analyze: each calls `batch.stage_batch` on the spec
of every batch of the plan (`batch.BatchPlan`) and returns the outcomes; the driver (`run.py`)
then commits the staged rows.

- `LocalEngine` (the default): the batches one after the other in this process; no JVM.
- `SparkEngine` (`engines/spark.py`, `--engine spark`): the batches as tasks of a Spark job.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from gpuwaste.analyses.batch import BatchOutcome, BatchPlan, stage_batch


class Engine(Protocol):
    def run(self, plan: BatchPlan, data_dir: Path, staging: Path) -> list[BatchOutcome]:
        """The outcome of every batch of `plan`, its rows staged under `staging`."""
        ...


class LocalEngine:
    """Every batch in this process, one at a time (memory: one batch)."""

    def run(self, plan: BatchPlan, data_dir: Path, staging: Path) -> list[BatchOutcome]:
        return [stage_batch(plan.spec(i), data_dir, staging) for i in range(plan.count)]


__all__ = ["Engine", "LocalEngine"]
