"""The warehouse: hive-partitioned parquet plus one DuckDB file of views."""

from gpuwaste.warehouse.catalog import connect, refresh_catalog
from gpuwaste.warehouse.results import RESULT_TABLES
from gpuwaste.warehouse.schema import FACT_TABLES, Table, all_tables, table
from gpuwaste.warehouse.store import Warehouse, WarehouseError

__all__ = [
    "FACT_TABLES",
    "RESULT_TABLES",
    "Table",
    "Warehouse",
    "WarehouseError",
    "all_tables",
    "connect",
    "refresh_catalog",
    "table",
]
