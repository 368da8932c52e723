"""A damaged warehouse file, named in one sentence.

A parquet file cut short (a full disk, a copy interrupted, a file edited by hand) makes DuckDB
fail every query of the views that glob it, with a message that names the file among SQL
context. `damaged_file_error` turns such an error into the operator's sentence: which file, and
what to do (restore it, or move it aside so the views read the rest). A file replaced by a
concurrent writer reads the same way for an instant; readers retry first (`read_retrying`).
"""

from __future__ import annotations

import os
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
    "prefetch registered for bytes outside file",
)
# DuckDB names the file in single or double quotes, in parentheses ("Parquet file (...)"), or
# bare before a comma ("Prefetch registered for bytes outside file: <path>, attempted range").
_PARQUET_PATH = re.compile(
    r"""['"(]([^'"()*?\[\]]+\.parquet)['")]|outside file: ([^'"*?\[\],]+\.parquet),"""
)


def named_file(message: str) -> str | None:
    """The parquet file a DuckDB error message names in its first line, if any."""
    first = message.strip().splitlines()[0] if message.strip() else ""
    found = _PARQUET_PATH.search(first)
    return None if found is None else found.group(1) or found.group(2)


def damaged_file_error(exc: BaseException) -> DamagedFileError | None:
    """The sentence for a DuckDB error caused by one unreadable parquet file, or None when the
    error is something else."""
    text = str(exc)
    first = text.strip().splitlines()[0] if text.strip() else ""
    path = named_file(first)
    if path is None or not any(mark in first.lower() for mark in DAMAGED_MARKS):
        return None
    why = first.split(": ", 1)[-1]
    why = re.sub(r"""\s*(?:'[^']*'|"[^"]*"|\([^)]*\.parquet\))|: \S+\.parquet(?=,)""", "", why)
    return DamagedFileError(
        f"the warehouse file {path} cannot be read (DuckDB: {why.strip()}): it is damaged or was "
        "not written by gpuwaste; restore it from a backup, or move it aside (add .damaged to its "
        "name) so that every other file is read, its rows missing until they are ingested again."
    )


T = TypeVar("T")
# A read fails at most this many times in a row while the file it names keeps being replaced (a
# writer that rewrites it again and again); an error that names no file is tried this often.
MAX_ATTEMPTS = 20
UNNAMED_ATTEMPTS = 5


def _identity(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def read_retrying(read: Callable[[], T]) -> T:
    """Run `read` (bind and fetch a query) again when a parquet file was replaced under it.

    DuckDB opens a parquet file more than once in one query (the footer when binding, the row
    groups when scanning); a writer's atomic rename in between makes the file read as corrupt
    (tests/reliability/test_concurrency.py, test_reads_during_writes.py). The next attempt
    reads the new file whole. A read that fails again on the same file, not replaced since the
    failure before, fails for good: that file is damaged, said in one sentence.
    """
    failed_on: dict[str, tuple[int, int, int] | None] = {}
    for attempt in range(MAX_ATTEMPTS):
        try:
            return read()
        except duckdb.Error as exc:
            text = str(exc)
            path = named_file(text)
            now = _identity(path) if path is not None else None
            again = path in failed_on and failed_on[path] == now  # the same bytes failed twice
            if (
                not any(m in text.lower() for m in DAMAGED_MARKS)
                or again
                or attempt == (MAX_ATTEMPTS if path is not None else UNNAMED_ATTEMPTS) - 1
            ):
                damaged = damaged_file_error(exc)
                if damaged is not None:
                    raise damaged from None
                raise
            if path is not None:
                failed_on[path] = now
            time.sleep(min(0.02 * (attempt + 1), 0.1))
    raise AssertionError("unreachable")


__all__ = ["DAMAGED_MARKS", "MAX_ATTEMPTS", "damaged_file_error", "named_file", "read_retrying"]
