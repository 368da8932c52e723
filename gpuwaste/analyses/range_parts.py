"""What a batch's host ranges hand on to the roll-up of its jobs, kept on disk past a bound.

Each host range adds its parts (the GPUs' rows and the per-job counts: `per_job.GPU_PARTS`), and
the batch rolls them up once its last range is done. A batch's ranges grow with the cluster, not
only with the batch: its jobs are those whose first host is among its 128, but its multi-host
jobs reach hosts anywhere, and the batch reads those too (more of them the larger the cluster:
bench/RESULTS.md, "The run's own steps capped", the batches' reach). Held in memory, the parts
grew with them, and the ranges after them were allocated around them, raising the run's peak;
written to disk past `PARTS_IN_MEMORY`, the peak is lower in the same time (bench/RESULTS.md, "A
batch's parts on disk past 16 MiB").

`RangeParts` holds at most `limit` bytes of parts; past it, it writes what it holds into one
Arrow IPC file per part, in a folder of the system's temporary directory (`TMPDIR`, else `/tmp`,
as Python's `tempfile` finds it) that `close` removes (use it in `contextlib.closing`: on an
error too); a folder a killed process left behind is removed by the next batch on the same host.
`read` gives every part's frames in the order they were added.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from collections.abc import Mapping
from pathlib import Path

import polars as pl

from gpuwaste.errors import DiskError, MachineError
from gpuwaste.warehouse.disk import disk_errno, disk_of

# Bytes of parts held in memory (polars' estimate) before they are written to disk; a batch of
# the benchmark at 1x (64 hosts) adds a little more than this, so it writes once or not at all
# (bench/RESULTS.md, "A batch's parts on disk past 16 MiB": the parts a batch holds).
PARTS_IN_MEMORY = 16 << 20
# A batch's folder: <TMPDIR>/gpuwaste-parts-<host>-<pid>-<random>.
PREFIX = "gpuwaste-parts-"


class RangeParts:
    """A batch's parts, host range by host range (`add`), all of them at the end (`read`); use
    it in `contextlib.closing`. `limit`: bytes held in memory at most (None: PARTS_IN_MEMORY)."""

    def __init__(self, limit: int | None = None) -> None:
        self.limit = PARTS_IN_MEMORY if limit is None else limit
        self._held: dict[str, list[pl.DataFrame]] = {}
        self._bytes = 0
        self._files: dict[str, list[Path]] = {}
        self._folder: Path | None = None

    def add(self, parts: Mapping[str, pl.DataFrame]) -> None:
        """One host range's parts (part name -> frame)."""
        for name, df in parts.items():
            self._held.setdefault(name, []).append(df)
            self._bytes += int(df.estimated_size())
        if self._bytes > self.limit:
            self._write()

    def _write(self) -> None:
        try:
            if self._folder is None:
                self._folder = _new_folder()
            for name, frames in self._held.items():
                files = self._files.setdefault(name, [])
                path = self._folder / f"{name}-{len(files):05d}.arrow"
                pl.concat(frames, how="vertical_relaxed").write_ipc(path)
                files.append(path)
        except OSError as exc:  # a full disk, a quota, no writable temporary folder at all
            where = self._folder or tempfile.tempdir or os.environ.get("TMPDIR") or "/tmp"
            code = disk_errno(exc)  # polars' OSError has its errno only in its text
            raise (MachineError if code is None else DiskError)(
                f"cannot write a batch's intermediate results in {where} (the temporary folder, "
                f"TMPDIR, on {disk_of(Path(where))}): "
                f"{exc.strerror or (os.strerror(code) if code else exc)}; point TMPDIR at a "
                "writable folder with room for about 100 MiB per batch running."
            ) from exc
        self._held, self._bytes = {}, 0

    def read(self) -> dict[str, list[pl.DataFrame]]:
        """Every part's frames, in the order they were added."""
        names = [*self._files, *(n for n in self._held if n not in self._files)]
        return {
            name: [
                *(pl.read_ipc(path) for path in self._files.get(name, [])),
                *self._held.get(name, []),
            ]
            for name in names
        }

    def close(self) -> None:
        """Forget every part and remove the folder (use the parts in `contextlib.closing`)."""
        self._held, self._files, self._bytes = {}, {}, 0
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None


def _new_folder() -> Path:
    """A new folder for one batch's parts in the temporary directory, named by this host and
    process; first the folders of this host's processes that are gone are removed (a process
    killed by SIGKILL, by the OOM killer or by Spark cancelling a task, cannot remove its own)."""
    host = socket.gethostname()
    for folder in Path(tempfile.gettempdir()).glob(f"{PREFIX}{host}-*-*"):
        # <host>-<pid>-<mkdtemp's suffix, no '-'>: split from the right, as a host name may
        # hold '-' (host "a" must not take host "a-5"'s folders for its own pid 5's)
        named, pid, _ = folder.name.removeprefix(PREFIX).rsplit("-", 2)
        if named == host and pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"{PREFIX}{host}-{os.getpid()}-"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


__all__ = ["PARTS_IN_MEMORY", "PREFIX", "RangeParts"]
