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
        """The outcome of every batch of `plan`, its rows staged under `staging` (an engine
        may stop after a batch whose disk refused a write: `BatchOutcome.disk`)."""
        ...


class LocalEngine:
    """Every batch in this process, one at a time (memory: one batch)."""

    def run(self, plan: BatchPlan, data_dir: Path, staging: Path) -> list[BatchOutcome]:
        outcomes: list[BatchOutcome] = []
        for i in range(plan.count):
            outcomes.append(stage_batch(plan.spec(i), data_dir, staging))
            if outcomes[-1].disk:  # the next batches would compute, then meet the same disk
                break
        return outcomes


__all__ = ["Engine", "LocalEngine"]
