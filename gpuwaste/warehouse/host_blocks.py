"""A day of samples cut by hosts: which file of a day holds which hosts (pure, no I/O).

A dated table's day (`<table>/cluster=<c>/date=<d>/`) is stored as one file per block of hosts:
`data.parquet` holds the hosts from the first, and `hosts-from-<host>.parquet` (the host name
percent-encoded) the hosts from that name on, up to the next file's. A day of at most
`BLOCK_HOSTS` hosts is one block, `data.parquet`, as every day was before blocks.

Why: a batch of `gpuwaste analyze` reads the samples of its hosts, but DuckDB reads the footer of
every file it names, and a footer grows with the rows of the file (a row group of about 116 k
rows each): a day of 1,024 hosts of 8 GPUs is 404 row groups, of which one batch of 128 hosts
reads 50. Cut by hosts, a batch names only its hosts' blocks (docs/scale.md).

The blocks of a day are set when the day is first written, from the hosts it then holds, and
never move: a host seen later goes to the block whose range holds its name, so each block file
is replaced alone (atomically, by a rename) and no row is ever in two files. The day's cut is
read from its files' names, including files moved aside (`hosts-from-x.parquet.damaged`), so
that restoring one replaces it as before. A day first written with at most `BLOCK_HOSTS` hosts
(a first window in which few hosts reported) stays one file whatever it holds later: nothing is
lost, but its batches read it whole.
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Sequence
from urllib.parse import quote, unquote

# At most this many hosts in a day's block when the day is first written (the batch's width in
# hosts, `analyses.run.BATCH_MAX_HOSTS`: a batch of neighbouring hosts names 1-2 blocks a day).
BLOCK_HOSTS = 128
FIRST_BLOCK_FILE = "data.parquet"
_PREFIX = "hosts-from-"
_SUFFIX = ".parquet"
# A host name encodes in at most this many characters of a file name: a file name is at most
# 255 bytes, and a block is written through `<name>.tmp-<32 hex digits>` (store.TMP_MARK), so
# 120 leaves room (and some for file systems that take more). A longer first host starts its
# block at a prefix of its name, still a lower bound of the block's hosts.
_MAX_ENCODED = 120


def file_name(boundary: str) -> str:
    """The file of the block whose hosts start at `boundary` ('' for the first block)."""
    return FIRST_BLOCK_FILE if boundary == "" else f"{_PREFIX}{quote(boundary, safe='')}{_SUFFIX}"


def boundary_of(name: str) -> str | None:
    """The first host of the block stored in the file called `name` ('' for the first block),
    or None when `name` is not the name `file_name` gives a block (a hand-made or differently
    encoded name is not a block: a write would go to another file)."""
    if name == FIRST_BLOCK_FILE:
        return ""
    if name.startswith(_PREFIX) and name.endswith(_SUFFIX):
        boundary = unquote(name[len(_PREFIX) : -len(_SUFFIX)])
        return boundary if boundary and file_name(boundary) == name else None
    return None


def cut_of(name: str) -> str | None:
    """The first host of the block that the file called `name` holds or held: a block's file,
    or one moved aside with a suffix (`hosts-from-x.parquet.damaged`), whose block the day
    still has (its hosts are in no file until it is restored or written again, never in the
    block before it). None for any other name."""
    boundary = boundary_of(name)
    if boundary is not None:  # a block's own name (a host may be called x.parquet.y)
        return boundary
    stem, dot, _ = name.rpartition(_SUFFIX + ".")
    return boundary_of(stem + _SUFFIX) if dot else None


def _encodable(host: str) -> str:
    """`host`, or its longest prefix that encodes in `_MAX_ENCODED` characters."""
    end = min(len(host), _MAX_ENCODED)  # a character encodes in 1 to 12 characters
    while len(quote(host[:end], safe="")) > _MAX_ENCODED:
        end -= 1
    return host[:end]


def new_boundaries(hosts: Collection[str], block_hosts: int = BLOCK_HOSTS) -> list[str]:
    """The blocks of a day first written with `hosts`: every `block_hosts` hosts in name order
    start a block ('' first). A prefix that would not be above the previous boundary (a long
    name cut to its prefix) starts no block: its hosts stay in the block before."""
    if block_hosts < 1:
        raise ValueError("a block holds at least one host")
    ordered = sorted(hosts)
    out = [""]
    for host in ordered[block_hosts::block_hosts]:
        start = _encodable(host)
        if start > out[-1]:
            out.append(start)
    return out


def block_index(boundaries: Sequence[str], host: str) -> int:
    """The position in `boundaries` (sorted, '' first) of the block that holds `host`."""
    return bisect.bisect_right(boundaries, host) - 1


def blocks_holding(boundaries: Sequence[str], hosts: Collection[str]) -> set[int]:
    """The positions of the blocks that hold at least one of `hosts`."""
    return {block_index(boundaries, h) for h in hosts}
