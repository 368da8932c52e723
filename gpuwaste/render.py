"""Print a table to the terminal (rich), or as CSV or JSON for scripts: the one renderer of
every table the command line prints.

CSV and JSON are the frame as it is (raw column names and units, for scripts). The terminal table
is for people (`render`): the titles and units of gpuwaste/columns.py, one number format per
unit, as wide as the terminal (`COLUMNS` or its size): a table wider than that leaves out its
least useful columns and says which and how to see them.

Text from the data (job names, user names) is untrusted: it is shown as text, never as rich
markup, and control characters are replaced by visible escapes so they cannot move the cursor,
clear the screen or forge lines.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import date, datetime
from enum import StrEnum
from typing import IO, Any

import polars as pl

from gpuwaste.columns import (
    DECIMALS,
    TIME_FORMAT,
    TRUE_FALSE,
    Column,
    Rank,
    code_words,
    column,
    count_unit,
    number,
)
from gpuwaste.text import printable


class OutputFormat(StrEnum):
    table = "table"
    csv = "csv"
    json = "json"


def safe_text(value: object) -> str:
    """A cell as printable text: control and bidi characters become \\xNN / \\uNNNN escapes."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return TRUE_FALSE[0] if value else TRUE_FALSE[1]
    if isinstance(value, float):  # a figure rounded by its caller: its digits, no exponent
        text = f"{value:,.4f}".rstrip("0").rstrip(".") if value == value else str(value)
        return "0" if text == "-0" else text
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


TEXT_WIDTH = 32  # a longer text cell (a job name, a reason) folds onto more lines, never cut
FALLBACK_WIDTH = 120  # the width when the output is not a terminal and COLUMNS is unset


def terminal_width() -> int:
    """The width to fit: `COLUMNS`, else the terminal's, else FALLBACK_WIDTH."""
    return shutil.get_terminal_size((FALLBACK_WIDTH, 24)).columns


def _cells(series: pl.Series, spec: Column) -> list[str]:
    """A column's values as shown: its unit's number format, times in UTC to the minute,
    booleans and codes as words, text made printable."""
    dtype = series.dtype
    if dtype.is_numeric() and not isinstance(dtype, pl.Boolean):
        scaled = series if spec.factor == 1 else series.cast(pl.Float64) * spec.factor
        unit = spec.unit or ("number" if dtype.is_float() or spec.factor != 1 else "count")
        values = scaled.to_list()
        if unit == "count" and dtype.is_float():
            unit = count_unit(values)
        return ["" if v is None else number(v, unit) for v in values]
    if isinstance(dtype, pl.Datetime):
        if dtype.time_zone:
            series = series.dt.convert_time_zone("UTC")
        return ["" if v is None else v.strftime(TIME_FORMAT) for v in series.to_list()]
    if spec.code and isinstance(dtype, pl.String):
        return [safe_text(None if v is None else code_words(v)) for v in series.to_list()]
    return [safe_text(v) for v in series.to_list()]


def single_member_rollups(df: pl.DataFrame, rollups: Mapping[str, str]) -> pl.DataFrame:
    """`df` without the roll-up rows (column `c` = label `rollups[c]`, e.g. vc = '(all)') that
    roll up one value only: with one VC (or one GPU model) in a cluster, its '(all)' row repeats
    that VC's. The other roll-up columns and the cluster split the groups."""
    for col, label in rollups.items():
        if col not in df.columns:
            continue
        by = [c for c in ("cluster", *rollups) if c in df.columns and c != col]
        members = pl.col(col).filter(pl.col(col) != label).n_unique()
        single = members.over(by) == 1 if by else members == 1
        df = df.filter(~((pl.col(col) == label) & single))
    return df


def most_first(df: pl.DataFrame, name: str) -> tuple[pl.DataFrame, list[str]]:
    """`df`'s rows for people by column `name`, most first, without those where it reads 0 in
    its unit (0.0 GPU hours: under 0.05), and the note that counts them; all of them when
    every row reads 0 (an empty table would say nothing)."""
    spec = column(name)
    unit = spec.unit or "number"
    under = 0.5 * 10 ** -DECIMALS.get(unit, DECIMALS["number"])
    shown = df.filter(pl.col(name).abs() * spec.factor >= under).sort(name, descending=True)
    if shown.height == 0 or shown.height == df.height:
        return df.sort(name, descending=True, nulls_last=True), []
    left = df.height - shown.height
    return shown, [
        f"{left:,} rows whose {spec.title} is under {under:g} (shown as {number(0, unit)}) "
        f"left out, so that the {shown.height:,} that say something come first (--format csv "
        "lists every row)."
    ]


def _spec(name: str, readable: bool, key: Sequence[str] | None) -> Column:
    """How column `name` is shown: its declaration (its raw name if not `readable`), ranked KEY
    if it is one of `key`."""
    spec = column(name) if readable else Column(name)
    if key is None:
        return spec
    if name in key:  # a key column of little use (an attempt, a MIG instance) may still go
        return spec if spec.rank == Rank.DETAIL else replace(spec, rank=Rank.KEY)
    return replace(spec, rank=Rank.FIGURE) if spec.rank == Rank.KEY else spec


def _fit(specs: list[Column], widths: list[int], width: int) -> tuple[list[int], list[int]]:
    """The indices of the columns kept to fit `width` (the table's borders and padding take 3 a
    column and 1), and of those left out: DETAIL columns first, then FIGURE ones, each from the
    right, then HEADLINE ones, and KEY ones only when nothing else is left (the first stays).
    Then a column left out goes back while it fits, the most useful first (a narrow one left out
    early fits in the room a wide one left out later made)."""

    def used(cols: list[int]) -> int:
        return sum(widths[k] + 3 for k in cols) + 1

    kept = list(range(len(specs)))
    for rank in (Rank.DETAIL, Rank.FIGURE, Rank.HEADLINE, Rank.KEY):
        for i in reversed(range(len(specs))):
            if used(kept) <= width:
                break
            if specs[i].rank == rank and len(kept) > 1:
                kept.remove(i)
    for i in sorted(set(range(len(specs))) - set(kept), key=lambda i: (specs[i].rank, i)):
        if used([*kept, i]) <= width:
            kept = sorted([*kept, i])
    return kept, sorted(set(range(len(specs))) - set(kept))


def _for_people(
    df: pl.DataFrame, title: str | None, readable: bool, rollups: Mapping[str, str] | None
) -> tuple[pl.DataFrame, str | None, list[str]]:
    """The rows and columns a table for people shows, its title, and the notes saying what it
    leaves out: roll-up rows that repeat their only member, a cluster column of one cluster
    (into the title), columns without any value."""
    notes: list[str] = []
    shown = df if rollups is None else single_member_rollups(df, rollups)
    if rollups is not None and shown.height < df.height:
        labels = " / ".join(sorted({f"{c} '{v}'" for c, v in rollups.items() if c in df.columns}))
        notes.append(
            f"{df.height - shown.height} roll-up rows ({labels}) left out: they repeat the only "
            "value they roll up (--format csv keeps them)."
        )
    if not readable:
        return shown, title, notes
    if "cluster" in shown.columns and shown["cluster"].n_unique() == 1:
        title = f"{title or ''} - cluster {safe_text(shown['cluster'][0])}".lstrip(" -")
        shown = shown.drop("cluster")
    empty = [c for c in shown.columns if shown[c].null_count() == shown.height > 0]
    if empty:
        notes.append(f"No values: {'; '.join(column(c).title for c in empty)}.")
        shown = shown.drop(empty)
    return shown, title, notes


def _layout(
    specs: list[Column], cells: list[list[str]], total: int
) -> tuple[list[int], list[int], list[int]]:
    """Each column's width (its longest value, at most TEXT_WIDTH for text, and its title's
    longest word), the columns kept to fit `total` and those left out (`_fit`); the width to
    spare goes to the headers that wrap, a few lines less each."""
    widths = []
    for spec, values in zip(specs, cells, strict=True):
        longest_word = max((len(w) for w in spec.title.split()), default=1)
        value_w = min(max((len(v) for v in values), default=0), TEXT_WIDTH)
        widths.append(max(longest_word, value_w))
    kept, dropped = _fit(specs, widths, total)
    spare = total - (sum(widths[k] + 3 for k in kept) + 1)
    for k in kept:
        more = min(spare, len(specs[k].title) - widths[k])
        if more > 0:
            widths[k] += more
            spare -= more
    return widths, kept, dropped


def render(
    df: pl.DataFrame,
    fmt: OutputFormat = OutputFormat.table,
    *,
    title: str | None = None,
    out: IO[str] | None = None,
    max_rows: int = 200,
    readable: bool = True,
    rollups: Mapping[str, str] | None = None,
    key: Sequence[str] | None = None,
    width: int | None = None,
    notes: Sequence[str] = (),
    raw: str = "--format csv",
) -> None:
    """Print `df` as a table for people, or as CSV / JSON (the raw frame) for scripts.

    - `readable=False` keeps the column names (`gpuwaste sql`: the query's own names) and
      values, in the one number format.
    - `rollups`: {column: label} of roll-up rows ('(all)'); the table leaves out those that
      repeat their only member (`single_member_rollups`), CSV and JSON keep every row.
    - `key`: the columns that say what a row is (a narrow terminal keeps them); default: those
      COLUMNS ranks KEY.
    - `width`: the width to fit (default: `terminal_width()`).
    - `notes`: lines the caller prints under the table for people (e.g. which jobs it counts);
      CSV and JSON leave them out.
    - `raw`: the command's option that prints every row and column (the notes name it).

    A table of no rows is one sentence, "No rows in 'title'.".
    """
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
    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    if df.height == 0:  # an empty frame and a note of columns left out would say nothing
        stream.write(f"No rows in '{safe_text(title)}'.\n" if title else "No rows.\n")
        return
    shown, title, left_out = _for_people(df, title, readable, rollups)
    specs = [_spec(c, readable, key) for c in shown.columns]
    head = shown.head(max_rows)
    cells = [_cells(head[c], spec) for c, spec in zip(shown.columns, specs, strict=True)]
    total = width or terminal_width()
    widths, kept, dropped = _layout(specs, cells, total)
    if dropped:
        names = "; ".join(specs[i].title for i in dropped)
        left_out.append(
            f"Left out to fit {total} columns: {names} (a wider terminal, e.g. COLUMNS=200, or "
            f"{raw} shows every column)."
        )
    table = Table(title=Text(title) if title else None, box=box.HEAVY_HEAD)
    for k in kept:
        numeric = shown.dtypes[k].is_numeric() and not isinstance(shown.dtypes[k], pl.Boolean)
        table.add_column(
            Text(specs[k].title),
            justify="right" if numeric else "left",
            width=widths[k],  # at least its longest value: a number never wraps
            overflow="fold",
        )
    for r in range(head.height):
        table.add_row(*(Text(cells[k][r]) for k in kept))
    console = Console(file=stream, width=max(total, sum(widths[k] + 3 for k in kept) + 1))
    console.print(table)
    if df.height > max_rows:
        left_out.append(f"... {df.height - max_rows} more rows (use {raw} for all)")
    for note in (*left_out, *notes):
        console.print(Text(note))
