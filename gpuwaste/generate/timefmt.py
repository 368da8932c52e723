"""Time and host-list formatting in the sources' own conventions."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from functools import lru_cache
from zoneinfo import ZoneInfo

PACIFIC = "America/Los_Angeles"


@lru_cache(maxsize=8)
def zone(name: str) -> ZoneInfo:
    return ZoneInfo(name)


def iso_z(epoch: int) -> str:
    """2026-10-31T12:00:15Z"""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def slurm_time(epoch: int, tz: str) -> str:
    """Slurm's format: local time in `tz`, no zone suffix (ambiguous at a fall-back, as Slurm is)."""
    return datetime.fromtimestamp(epoch, zone(tz)).strftime("%Y-%m-%dT%H:%M:%S")


def slurm_duration(seconds: int) -> str:
    """[D-]HH:MM:SS as in Elapsed and Timelimit."""
    d, rem = divmod(seconds, 86400)
    h, rem = divmod(rem, 3600)
    m, s = divmod(rem, 60)
    return f"{d}-{h:02d}:{m:02d}:{s:02d}" if d else f"{h:02d}:{m:02d}:{s:02d}"


def pacific(epoch: int, with_zone: bool = False) -> str:
    """Philly's local US Pacific time: `YYYY-MM-DD HH:MM:SS`, optionally with ` PDT`/` PST`."""
    fmt = "%Y-%m-%d %H:%M:%S %Z" if with_zone else "%Y-%m-%d %H:%M:%S"
    return datetime.fromtimestamp(epoch, zone(PACIFIC)).strftime(fmt)


_NUM = re.compile(r"^(.*?)(\d+)$")


def compress_hostlist(hosts: list[str]) -> str:
    """Slurm's compressed node list: gpu-node-[001-003,007], gpu-node-004, a-[1-2],b-5."""
    groups: dict[tuple[str, int], list[int]] = {}
    order: list[tuple[str, int]] = []
    plain: list[str] = []
    for h in sorted(set(hosts)):
        m = _NUM.match(h)
        if not m:
            plain.append(h)
            continue
        key = (m.group(1), len(m.group(2)))
        if key not in groups:
            groups[key] = []
            order.append(key)
        groups[key].append(int(m.group(2)))
    parts = list(plain)
    for prefix, width in order:
        nums = sorted(groups[(prefix, width)])
        if len(nums) == 1:
            parts.append(f"{prefix}{nums[0]:0{width}d}")
            continue
        parts.append(f"{prefix}[{compress_ints(nums, width)}]")
    return ",".join(parts)


def compress_ints(nums: list[int], width: int = 0) -> str:
    """Slurm's range list of sorted distinct numbers: 0-2,5 (zero-padded to `width`)."""
    ranges: list[str] = []
    a = b = nums[0]
    for x in [*nums[1:], None]:
        if x is not None and x == b + 1:
            b = x
            continue
        ranges.append(f"{a:0{width}d}" if a == b else f"{a:0{width}d}-{b:0{width}d}")
        if x is not None:
            a = b = x
    return ",".join(ranges)
