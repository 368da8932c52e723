"""A write the disk refused, said in one sentence that names the disk and the folder.

Every write of gpuwaste (the warehouse's parquet files, the catalog, the analyze state, the
staging files, the lock files) that fails goes through `write_error`. A full disk, a used-up
quota or a read-only file system becomes a `DiskError`: `the disk holding <folder> is full (No
space left on device; <mount point>, <file system>): <file> was not written and every stored
file is whole; free space there and run again.` Any other OSError stays `could not write <path>:
<reason>.`

The errno is found in the exception or its chain (`__cause__`, `__context__`). DuckDB and polars
carry it only as text ("Could not write file \\"...\\": No space left on device", "... (os error
28)", `"errno":"28"`): those two libraries' messages are matched on the errno or on the C
library's words for it after a colon, nothing else's.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb
import polars as pl

from gpuwaste.errors import DiskError, GpuwasteError, WarehouseError

# The refusals that are the disk's, not the file's, with what the operator does about each.
_WHAT_TO_DO = {
    errno.ENOSPC: ("is full", "free space there and run again"),
    errno.EDQUOT: ("is over its quota", "free space or raise the quota, and run again"),
    errno.EROFS: ("is read-only", "make it writable and run again"),
}
DISK_ERRNOS = frozenset(_WHAT_TO_DO)
_NUMBERED = re.compile(r'os error (\d+)\)|\[Errno (\d+)\]|"errno":\s*"(\d+)"')
_WORDS = {os.strerror(code): code for code in DISK_ERRNOS}


def _errno_in_text(text: str) -> int | None:
    for match in _NUMBERED.finditer(text):
        code = int(next(g for g in match.groups() if g))
        if code in DISK_ERRNOS:
            return code
    for words, code in _WORDS.items():
        if f": {words}" in text:
            return code
    return None


def disk_errno(exc: BaseException) -> int | None:
    """ENOSPC, EDQUOT or EROFS if `exc`, or an exception in its chain, is the disk refusing a
    write; else None."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, OSError) and cur.errno in DISK_ERRNOS:
            return cur.errno
        if isinstance(cur, duckdb.Error | pl.exceptions.PolarsError) or (
            isinstance(cur, OSError) and cur.errno is None  # pyarrow's and polars' OSErrors
        ):
            code = _errno_in_text(str(cur))
            if code is not None:
                return code
        cur = cur.__cause__ or cur.__context__
    return None


def _unescape(field: str) -> str:
    """A path as /proc/self/mounts writes it (space, tab, newline, backslash as octal)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def disk_of(path: Path) -> str:
    """The disk holding `path`, as '<mount point>, <file system type>' (the type left out where
    /proc/self/mounts cannot be read)."""
    here = Path(os.path.abspath(path))
    while not here.exists() and here != here.parent:
        here = here.parent
    here = here.resolve()
    mount = here
    while not os.path.ismount(mount) and mount != mount.parent:
        mount = mount.parent
    fstype = ""
    try:
        with open("/proc/self/mounts", encoding="utf-8", errors="replace") as fh:
            for line in fh:  # the last mount on a point is the one seen
                fields = line.split()
                if len(fields) > 2 and _unescape(fields[1]) == str(mount):
                    fstype = fields[2]
    except OSError:
        pass
    return f"{mount}, {fstype}" if fstype else str(mount)


def write_error(exc: BaseException, path: Path, done: str = "") -> GpuwasteError | None:
    """The one sentence for a failed write of `path` (a file, or a folder being made): a
    `DiskError` naming the disk and the folder when the disk refused it, a `WarehouseError`
    `could not write <path>: <reason>.` for any other OSError, None for anything else (a bug,
    not the disk: let it be raised). `done`: what the failure left, when more than `path` (by
    default '<name> was not written and every stored file is whole')."""
    if isinstance(exc, GpuwasteError):  # said already (by a `writing` inside)
        return None
    code = disk_errno(exc)
    if code is not None:
        state, todo = _WHAT_TO_DO[code]
        done = done or f"{path.name} was not written and every stored file is whole"
        return DiskError(
            f"the disk holding {path.parent} {state} ({os.strerror(code)}; {disk_of(path)}): "
            f"{done}; {todo}."
        )
    if isinstance(exc, OSError):
        return WarehouseError(f"could not write {path}: {exc.strerror or exc}.")
    return None


@contextmanager
def writing(path: Path, done: str = "") -> Iterator[None]:
    """Raise the sentence of `write_error` for a write of `path` that fails in the block."""
    try:
        yield
    except Exception as exc:
        said = write_error(exc, path, done)
        if said is None:
            raise
        raise said from exc


__all__ = ["DISK_ERRNOS", "DiskError", "disk_errno", "disk_of", "write_error", "writing"]
