"""Which columns of some parquet files can hold a value, from their footers alone (no row read).

A file that lacks a column (written before the column was declared) holds none of it, and one
whose every row group's statistics count all its rows as nulls of it holds none either. Each
file's footer is one small read (`file_values`); what a set of files can hold is pure logic
over them (`may_hold_values`). The warehouse writes every file with statistics
(`store.atomic_write_parquet`); a row group without a null count, or a footer that could not be
read, counts as "may hold", so nothing here ever leaves a value out.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import Path

# Per column a file holds (of those asked about): how many of its values are not null, as its
# row groups' statistics count them (None: some row group does not say). A column the file does
# not hold has no key.
FileValues = Mapping[str, int | None]


def file_values(path: Path, columns: Collection[str]) -> FileValues | None:
    """Per column of `columns` that the parquet file at `path` holds, its non-null values from
    the footer's row-group statistics (`FileValues`); None when the footer could not be read
    (the file removed or replaced under us, or damaged: the read of its rows names it)."""
    import pyarrow.parquet as pq  # deferred: a command that never reads footers skips pyarrow

    try:
        meta = pq.read_metadata(path)
    except (OSError, ValueError):  # pyarrow's ArrowInvalid is a ValueError
        return None
    index = {meta.schema.column(i).path: i for i in range(meta.num_columns)}
    out: dict[str, int | None] = {}
    for name in columns:
        i = index.get(name)
        if i is None:
            continue
        count: int | None = 0
        for r in range(meta.num_row_groups):
            group = meta.row_group(r)
            stats = group.column(i).statistics
            if stats is None or not stats.has_null_count:
                count = None
                break
            count = (count or 0) + group.num_rows - stats.null_count
        out[name] = count
    return out


def may_hold_values(files: Iterable[FileValues | None], columns: Sequence[str]) -> tuple[str, ...]:
    """Pure: the columns of `columns` (in their order) that some file of `files` may hold a
    value of: one it holds with values or with an unknown count, or every column of a file
    whose footer was not read (None). A column no file holds, or held with no value in any
    file, is left out."""
    wanted: set[str] = set()
    for values in files:
        if values is None:
            return tuple(columns)
        wanted.update(c for c, n in values.items() if n is None or n > 0)
    return tuple(c for c in columns if c in wanted)


class Footers:
    """`file_values` of `columns` per file, each footer read once while the file keeps its size
    and modification time (a file replaced by a writer is read again): the host ranges of one
    batch read the same day files."""

    def __init__(self, columns: Sequence[str]) -> None:
        self.columns = tuple(columns)
        self._seen: dict[Path, tuple[tuple[int, int], FileValues | None]] = {}

    def values(self, path: Path) -> FileValues | None:
        """`file_values` of `path` (None: not readable now)."""
        try:
            st = path.stat()
        except OSError:
            return None
        key = (st.st_size, st.st_mtime_ns)
        seen = self._seen.get(path)
        if seen is not None and seen[0] == key:
            return seen[1]
        values = file_values(path, self.columns)
        self._seen[path] = (key, values)
        return values

    def may_hold_values(self, files: Iterable[Path]) -> tuple[str, ...]:
        """The columns some of `files` may hold a value of (`may_hold_values`)."""
        return may_hold_values((self.values(f) for f in files), self.columns)


__all__ = ["FileValues", "Footers", "file_values", "may_hold_values"]
