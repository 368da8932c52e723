"""Print a table to the terminal (rich), or as CSV or JSON for scripts.

Text from the data (job names, user names) is untrusted: it is shown as text, never as rich
markup, and control characters are replaced by visible escapes so they cannot move the cursor,
clear the screen or forge lines.
"""

from __future__ import annotations

import json
import sys
from datetime import date, datetime
from enum import StrEnum
from typing import IO, Any

import polars as pl

from gpuwaste.text import printable


class OutputFormat(StrEnum):
    table = "table"
    csv = "csv"
    json = "json"


def safe_text(value: object) -> str:
    """A cell as printable text: control and bidi characters become \\xNN / \\uNNNN escapes."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e6 else f"{value:,.0f}"
    if isinstance(value, datetime):
        return value.isoformat(sep=" ", timespec="seconds")
    return printable(str(value))


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    return str(value)


def _flat(df: pl.DataFrame) -> pl.DataFrame:
    """Columns CSV cannot hold (nested, extension types) as JSON text."""
    plain = (pl.String, pl.Boolean, pl.Date, pl.Datetime, pl.Duration, pl.Time, pl.Null)
    return df.with_columns(
        pl.Series(
            c,
            [None if v is None else json.dumps(v, default=_json_default) for v in df[c].to_list()],
            pl.String,
        )
        for c, t in df.schema.items()
        if not (t.is_numeric() or isinstance(t, plain))
    )


def render(
    df: pl.DataFrame,
    fmt: OutputFormat = OutputFormat.table,
    *,
    title: str | None = None,
    out: IO[str] | None = None,
    max_rows: int = 200,
) -> None:
    stream = out or sys.stdout
    if fmt == OutputFormat.csv:
        try:
            stream.write(df.write_csv())
        except pl.exceptions.ComputeError:  # lists, structs, variants: written as JSON text
            stream.write(_flat(df).write_csv())
        return
    if fmt == OutputFormat.json:
        json.dump(df.to_dicts(), stream, default=_json_default, indent=1)
        stream.write("\n")
        return
    # rich here, not at the top: every command imports this module (`gpuwaste job` prints no table)
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(title=Text(title) if title else None, show_lines=False)
    for name in df.columns:
        numeric = df.schema[name].is_numeric()
        table.add_column(Text(name), justify="right" if numeric else "left")
    for row in df.head(max_rows).iter_rows():
        table.add_row(*(Text(safe_text(v)) for v in row))
    console = Console(file=stream, width=max(100, Console().width))
    console.print(table)
    if df.height > max_rows:
        console.print(Text(f"... {df.height - max_rows} more rows (use --format csv for all)"))
