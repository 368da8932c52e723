"""One writer at a time: an advisory lock file in the data directory.

`flock` is released by the kernel when the holder exits, even on SIGKILL, so a crashed run never
leaves a stale lock behind.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gpuwaste.errors import DiskError, GpuwasteError
from gpuwaste.warehouse.disk import write_error, writing


class WarehouseLocked(GpuwasteError):
    """Another gpuwaste process holds the lock."""


@contextmanager
def writer_lock(data_dir: Path, what: str = "ingest") -> Iterator[None]:
    path = data_dir / f".{what}.lock"
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:  # read-only, full, or not a directory: one sentence, no traceback
        said = write_error(exc, path, "nothing was written")
        if isinstance(said, DiskError):
            raise said from None
        raise GpuwasteError(
            f"cannot write to the data directory {data_dir} ({exc.strerror or exc}); "
            "nothing was written."
        ) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "another process"
            raise WarehouseLocked(
                f"another gpuwaste {what} is already running on {data_dir} (pid {holder}); "
                "this one exits without writing."
            ) from None
        with writing(path, "nothing was written"):  # the pid needs a block of the disk
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)
