"""A damaged warehouse file, named in one sentence.

A parquet file cut short (a full disk, a copy interrupted, a file edited by hand) makes DuckDB
fail every query of the views that glob it, with a message that names the file among SQL
context. `damaged_file_error` turns such an error into the operator's sentence: which file, and
what to do (restore it, or move it aside so the views read the rest). A file replaced by a
concurrent writer reads the same way for an instant; readers retry first (`read_retrying`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import TypeVar

import duckdb

from gpuwaste.errors import DamagedFileError

# What DuckDB says of a parquet file it cannot read (the first line of its message, compared
# in lower case). Pages read at the offsets of another file's footer (a file replaced between
# DuckDB's two opens of it) fail to decompress or decompress to the wrong size.
DAMAGED_MARKS = (
    "no magic bytes found",
    "too small to be a parquet file",
    "tprotocolexception",
    "corrupt",
    "invalid data",
    "don't know what type",
    "decompression failure",
    "page size mismatch",
)
# DuckDB names the file in single or double quotes, or in parentheses ("Parquet file (...)").
_PARQUET_PATH = re.compile(r"""['"(]([^'"()*?\[\]]+\.parquet)['")]""")


def damaged_file_error(exc: BaseException) -> DamagedFileError | None:
    """The sentence for a DuckDB error caused by one unreadable parquet file, or None when the
    error is something else."""
    text = str(exc)
    first = text.strip().splitlines()[0] if text.strip() else ""
    if not any(mark in first.lower() for mark in DAMAGED_MARKS):
        return None
    found = _PARQUET_PATH.search(first)
    if found is None:
        return None
    path = found.group(1)
    why = re.sub(r"""\s*(?:'[^']*'|"[^"]*"|\([^)]*\.parquet\))""", "", first.split(": ", 1)[-1])
    why = why.strip()
    return DamagedFileError(
        f"the warehouse file {path} cannot be read (DuckDB: {why}): it is damaged or was not "
        "written by gpuwaste; restore it from a backup, or move it aside (add .damaged to its "
        "name) so that every other file is read, its rows missing until they are ingested again."
    )


T = TypeVar("T")
_REPLACED_UNDERNEATH = ("prefetch registered for bytes outside file", *DAMAGED_MARKS)


def read_retrying(read: Callable[[], T], attempts: int = 5) -> T:
    """Run `read` (bind and fetch a query) again when a parquet file was replaced under it.

    DuckDB opens a parquet file more than once in one query (the footer when binding, the row
    groups when scanning); a writer's atomic rename in between makes the file read as corrupt
    (tests/reliability/test_concurrency.py). The next attempt reads the new file whole.
    """
    for attempt in range(attempts):
        try:
            return read()
        except duckdb.Error as exc:
            text = str(exc).lower()
            if attempt == attempts - 1 or not any(m in text for m in _REPLACED_UNDERNEATH):
                damaged = damaged_file_error(exc)  # still unreadable: the file itself is damaged
                if damaged is not None:
                    raise damaged from None
                raise
            time.sleep(0.02 * (attempt + 1))
    raise AssertionError("unreachable")


__all__ = ["DAMAGED_MARKS", "damaged_file_error", "read_retrying"]
