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
is replaced alone (atomically, by a rename) and no row is ever in two files.
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
# A host name encodes in at most this many characters of a file name (a file name is at most
# 255 bytes): a longer first host starts its block at a prefix of its name, still a lower bound.
_MAX_ENCODED = 200


def file_name(boundary: str) -> str:
    """The file of the block whose hosts start at `boundary` ('' for the first block)."""
    return FIRST_BLOCK_FILE if boundary == "" else f"{_PREFIX}{quote(boundary, safe='')}{_SUFFIX}"


def boundary_of(name: str) -> str | None:
    """The first host of the block stored in the file called `name` ('' for the first block),
    or None when `name` is not a block file's name."""
    if name == FIRST_BLOCK_FILE:
        return ""
    if name.startswith(_PREFIX) and name.endswith(_SUFFIX):
        boundary = unquote(name[len(_PREFIX) : -len(_SUFFIX)])
        return boundary or None
    return None


def _encodable(host: str) -> str:
    """`host`, or its longest prefix that encodes in `_MAX_ENCODED` characters."""
    end = len(host)
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
