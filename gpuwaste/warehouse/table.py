"""A warehouse table's declaration (`Table`), below every list of tables: the fact and state
tables (`schema.py`) and the result tables (`results.py`) are declared with it, and schema.py's
catalog of all tables takes both lists. Also what both lists share: the columns of a job's
device (`DEVICE_COLUMNS`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import polars as pl

UTC_TS = pl.Datetime("us", "UTC")

# One device of one attempt of a job, the key of the tables with a row per device (job_gpus and
# the per-device results), and its columns, in this order in each of them.
DEVICE_KEY = ("job_id", "attempt", "host", "gpu", "gpu_instance")
DEVICE_COLUMNS: dict[str, pl.DataType] = {
    "job_id": pl.String(),
    "attempt": pl.Int16(),
    "host": pl.String(),
    "gpu": pl.Int16(),
    "gpu_instance": pl.Int16(),  # MIG GPU instance; null for a whole GPU or when unknown
    "mig_profile": pl.String(),  # the MIG profile allocated (Slurm GRES type, k8s resource)
}

Layout = Literal["dated", "cluster"]


@dataclass(frozen=True)
class Table:
    name: str
    columns: dict[str, pl.DataType]
    layout: Layout
    key: tuple[str, ...] = ()  # primary key within (cluster, file key), for upserts
    sort: tuple[str, ...] = ()
    doc: str = ""
    result: bool = False
    partition_cols: tuple[str, ...] = field(default=("cluster",))

    @property
    def schema(self) -> pl.Schema:
        return pl.Schema(self.columns)

    @property
    def stored_columns(self) -> dict[str, pl.DataType]:
        """Columns inside the parquet files (partition columns live in the path)."""
        return {k: v for k, v in self.columns.items() if k not in self.partition_cols}
