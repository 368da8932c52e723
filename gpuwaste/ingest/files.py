"""Reading an input file a block at a time, within bounds (I/O for the file sources).

`what` names the format in messages ("OpenMetrics": "OpenMetrics file <path> does not exist.").

The OpenMetrics source never holds a whole file: `text_blocks` gives its text as blocks of whole lines of
about `chunk_bytes`, a `.gz` decompressed as it is read (the Philly source's utilization files:
`byte_blocks`, the same blocks undecoded). Past `[files] max_size_gib` of text, or
(a `.gz`) past `max_gzip_ratio` times its size on disk, or with a line longer than `MAX_LINE`, the
file is refused with one sentence naming it and the bound (`IngestError`): a gzip bomb stops after
decompressing at most the ratio times its size, which is checked before anything is parsed or
written (`text_tail` reads the whole stream once). The sources that still read a file whole
(sacct, scontrol, the Philly job log, a generic jobs file) refuse one past `[files]
max_read_whole_mib` (`check_read_whole`). Job logs are read from their tail (`read_tail`): a
plain file by a seek, a `.gz` as a stream of which only the last bytes are kept, within the same
bounds.
"""

from __future__ import annotations

import codecs
import gzip
import os
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from gpuwaste.config import FileLimits
from gpuwaste.ingest.base import IngestError

GZIP_MAGIC = b"\x1f\x8b"
READ_BYTES = 1 << 20  # one read of the (decompressed) stream
CHUNK_BYTES = 16 << 20  # text handed to a parser at once
MAX_LINE = 1 << 20  # no line of a text export is this long; past it the file is refused


class OverBound(IngestError):
    """A file past a bound of `[files]`; `reason` says which, without the file's name (for a
    source that quarantines the file and reads the others)."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path} {reason}; nothing was written.")
        self.reason = reason


class _Bounded:
    """A file's bytes (a `.gz` decompressed), refusing more than its bounds allow."""

    def __init__(self, path: Path, what: str, limits: FileLimits, fh: BinaryIO) -> None:
        self.path, self.what = path, what
        on_disk = path.stat().st_size
        self.gzipped = fh.read(2) == GZIP_MAGIC
        fh.seek(0)
        self.max_bytes = int(limits.max_size_gib * (1 << 30))
        self.size_bound = f"[files] max_size_gib = {limits.max_size_gib:g}"
        if self.gzipped:
            by_ratio = int(limits.max_gzip_ratio * max(on_disk, 1))
            if by_ratio < self.max_bytes:
                self.max_bytes = by_ratio
                self.size_bound = (
                    f"{limits.max_gzip_ratio:g} times its {on_disk:,} bytes, "
                    f"[files] max_gzip_ratio = {limits.max_gzip_ratio:g}"
                )
        elif on_disk > self.max_bytes:
            self._refuse()
        self.stream: BinaryIO = gzip.GzipFile(fileobj=fh) if self.gzipped else fh  # type: ignore[assignment]
        self.total = 0

    def _refuse(self) -> None:
        text = "decompresses to" if self.gzipped else "holds"
        raise OverBound(
            self.path,
            f"{text} more than {self.max_bytes:,} bytes of text ({self.size_bound}): "
            f"refused as {'a likely gzip bomb' if self.gzipped else 'too large'}",
        )

    def read(self, size: int = READ_BYTES) -> bytes:
        """The next bytes (at most `size`), b"" at the end."""
        try:
            data = self.stream.read(size)
        except (OSError, EOFError, zlib.error) as exc:
            raise IngestError(f"could not read {self.what} file {self.path}: {exc}.") from None
        self.total += len(data)
        if self.total > self.max_bytes:
            self._refuse()
        return data


@contextmanager
def _open(path: Path, what: str, limits: FileLimits) -> Iterator[_Bounded]:
    if not path.is_file():
        raise IngestError(f"{what} file {path} does not exist.")
    try:
        fh = open(path, "rb")  # noqa: SIM115 (closed below, after the reader)
    except OSError as exc:
        raise IngestError(f"could not read {what} file {path}: {exc.strerror or exc}.") from None
    with fh:
        yield _Bounded(path, what, limits, fh)


def check_read_whole(path: Path, what: str, limits: FileLimits) -> None:
    """Refuse a file that a source reads whole when it is larger than `[files]
    max_read_whole_mib` (one sentence); a missing file is left to the caller's message."""
    try:
        size = path.stat().st_size
    except OSError:
        return
    bound = int(limits.max_read_whole_mib * (1 << 20))
    if size > bound:
        raise IngestError(
            f"{path} is {size:,} bytes, more than the {bound:,} that a {what} file read whole "
            f"may be ([files] max_read_whole_mib = {limits.max_read_whole_mib:g}): split it or "
            "raise the bound; nothing was written."
        )


def read_whole(path: Path, what: str, limits: FileLimits) -> bytes:
    """A file a source reads whole (a `.gz` decompressed as it is read), refused past `[files]
    max_read_whole_mib`: its size on disk, then its text once decompressed (and a gzip bomb as
    `_Bounded` refuses it)."""
    check_read_whole(path, what, limits)
    bound = int(limits.max_read_whole_mib * (1 << 20))
    parts: list[bytes] = []
    total = 0
    with _open(path, what, limits) as reader:
        while data := reader.read():
            total += len(data)
            if total > bound:
                raise IngestError(
                    f"{path} decompresses to more than the {bound:,} bytes that a {what} file "
                    f"read whole may be ([files] max_read_whole_mib = "
                    f"{limits.max_read_whole_mib:g}): split it or raise the bound; nothing was "
                    "written."
                )
            parts.append(data)
    return b"".join(parts)


def read_tail(path: Path, what: str, limits: FileLimits, tail_bytes: int) -> tuple[bytes, bool]:
    """The last `tail_bytes` bytes of the file's text and whether they are all of it. A plain
    file is read from a seek to its tail; a `.gz` (by its magic bytes) is decompressed as a
    stream of which only the last `tail_bytes` are kept, so memory stays within about twice that
    whatever the file inflates to, and a gzip bomb is refused (`OverBound`) once it passes
    `_Bounded`'s bounds. OSError when the file cannot be opened."""
    with path.open("rb") as fh:
        if fh.read(2) != GZIP_MAGIC:
            size = os.fstat(fh.fileno()).st_size
            start = max(0, size - tail_bytes)
            fh.seek(start)
            return fh.read(tail_bytes), start == 0
        fh.seek(0)
        reader = _Bounded(path, what, limits, fh)
        kept = bytearray()
        while data := reader.read():
            kept += data
            if len(kept) > 2 * tail_bytes:  # trimmed in halves: each byte moved at most twice
                del kept[: len(kept) - tail_bytes]
        return bytes(kept[-tail_bytes:]), reader.total <= tail_bytes


def _not_utf8(path: Path, what: str) -> IngestError:
    return IngestError(f"{path} is not {what} text (not UTF-8).")


def text_tail(path: Path, what: str, limits: FileLimits, n: int = 64) -> str:
    """The last `n` characters of the file's text without its trailing whitespace, read through
    once within the bounds (a refused file is refused here, before anything is parsed)."""
    tail = ""
    decoder = codecs.getincrementaldecoder("utf-8")()
    with _open(path, what, limits) as reader:
        while True:
            data = reader.read()
            try:
                text = decoder.decode(data, final=not data)
            except UnicodeDecodeError:
                raise _not_utf8(path, what) from None
            stripped = (tail + text).rstrip()
            if stripped:
                tail = stripped[-n:]
            if not data:
                return tail


def byte_blocks(
    path: Path, what: str, limits: FileLimits, chunk_bytes: int = CHUNK_BYTES
) -> Iterator[tuple[int, bytes, bool]]:
    """(number of the first line, bytes, whether it is the last block) of the file in file order,
    about `chunk_bytes` at a time (a `.gz` decompressed), within the bounds: every block but the
    last ends with a `\\n`; the last holds the rest (maybe nothing, maybe no final `\\n`). The
    bytes are not decoded: a parser that refuses a line that is not UTF-8 (Philly's) gets them."""
    lineno = 1
    buf = bytearray()
    line_start = 0  # where the last line in `buf` starts
    with _open(path, what, limits) as reader:
        while True:
            data = reader.read(min(READ_BYTES, chunk_bytes))
            nl = data.rfind(b"\n")
            if nl >= 0:
                line_start = len(buf) + nl + 1
            buf += data
            if len(buf) - line_start > MAX_LINE:
                at = lineno + buf.count(b"\n", 0, line_start)
                raise IngestError(
                    f"{path} has a line longer than {MAX_LINE:,} bytes (line {at:,}): not {what} text; "
                    "nothing was written."
                )
            if data and (len(buf) < chunk_bytes or line_start == 0):
                continue
            cut = line_start if data else len(buf)
            block = bytes(buf[:cut])
            del buf[:cut]
            line_start -= cut
            yield lineno, block, not data
            if not data:
                return
            lineno += block.count(b"\n")


def text_blocks(
    path: Path, what: str, limits: FileLimits, chunk_bytes: int = CHUNK_BYTES
) -> Iterator[tuple[int, list[str]]]:
    """(number of the first line, lines) of the file's text in file order, about `chunk_bytes`
    of text at a time (`byte_blocks`), split at `\\n` as `str.split` splits the whole text (so the
    last block ends with the empty line after a final `\\n`, and the lines number `str.split`'s)."""
    for lineno, block, last in byte_blocks(path, what, limits, chunk_bytes):
        try:
            text = block.decode("utf-8")
        except UnicodeDecodeError:
            raise _not_utf8(path, what) from None
        lines = text.split("\n")
        if not last:
            lines.pop()  # the empty string after the block's last line end
        yield lineno, lines
