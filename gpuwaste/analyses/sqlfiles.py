"""The SQL files under `gpuwaste/sql/`, and the variables they read with `getvariable(...)`.

Each file is one query an operator can read and run in `duckdb` after `set variable ...` for
the variables its header names; the analyses bind the same variables from the settings.
"""

from __future__ import annotations

from datetime import date, datetime
from functools import cache
from importlib import resources

import duckdb

from gpuwaste.config import Thresholds

Scalar = str | int | float | bool | date | datetime | list[float] | None


@cache
def load_sql(name: str) -> str:
    """Text of `gpuwaste/sql/<name>.sql`, e.g. `load_sql("analyses/idle_slots")`."""
    return resources.files("gpuwaste").joinpath(f"sql/{name}.sql").read_text(encoding="utf-8")


def _literal(value: Scalar) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return f"{float(value)!r}::double" if isinstance(value, float) else str(value)
    if isinstance(value, datetime):
        return f"timestamptz '{value.isoformat()}'"
    if isinstance(value, date):
        return f"date '{value.isoformat()}'"
    if isinstance(value, list):
        return "[" + ", ".join(repr(float(v)) for v in value) + "]::double[]"
    return "'" + str(value).replace("'", "''") + "'"


def set_variables(con: duckdb.DuckDBPyConnection, values: dict[str, Scalar]) -> None:
    """`set variable name = value` for each entry (values are typed literals, never spliced text
    from the data: names and values come from the settings)."""
    for name, value in values.items():
        con.execute(f"set variable {name} = {_literal(value)}")


def threshold_variables(t: Thresholds) -> dict[str, Scalar]:
    """Every threshold as a SQL variable of the same name."""
    out: dict[str, Scalar] = {}
    for name, value in t.model_dump().items():
        out[name] = value
    return out
