"""A warehouse table's declaration (`Table`), below every list of tables: the fact and state
tables (`schema.py`) and the result tables (`results.py`) are declared with it, and schema.py's
catalog of all tables takes both lists."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import polars as pl

UTC_TS = pl.Datetime("us", "UTC")

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
