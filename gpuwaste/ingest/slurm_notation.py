"""Slurm's notations, read by the Slurm source and by tabular exports that use them (pure).

- Host lists: `node[01-04,07]`, `gpu-a[1-2],gpu-b3`, `r[1-2]-n[01-02]` -> host names
  (`expand_hostlist`).
- GPU index lists: `0-3,5` -> [0, 1, 2, 3, 5] (`expand_indices`).
- Job states: `COMPLETED`, `CANCELLED by 1234`, ... -> passed | killed | unsuccessful | running |
  pending (`map_state`).

Host lists: the syntax is Slurm's (`scontrol show hostnames`): commas outside brackets separate
entries; inside brackets, comma-separated numbers or `lo-hi` ranges whose zero padding is the
width of `lo`; several bracket groups in one entry expand as a cartesian product, left to right.
"""

from __future__ import annotations

import re

# Values Slurm prints where a job has no nodes (pending, cancelled before start).
NO_HOSTS = frozenset({"", "None assigned", "(null)", "None", "Unknown"})

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
MAX_HOSTS = 100_000  # a typo like node[1-99999999] must not exhaust memory


class HostListError(ValueError):
    """The text is not a Slurm host list."""


def _split_top(text: str) -> list[str]:
    """Split at commas that are outside brackets."""
    parts: list[str] = []
    depth = 0
    cur: list[str] = []
    for ch in text:
        if ch == "[":
            depth += 1
            if depth > 1:
                raise HostListError(f"nested brackets in host list {text!r}")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostListError(f"unbalanced ']' in host list {text!r}")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth != 0:
        raise HostListError(f"unbalanced '[' in host list {text!r}")
    parts.append("".join(cur))
    return parts


def _expand_range(spec: str, whole: str) -> list[str]:
    out: list[str] = []
    for item in spec.split(","):
        m = _RANGE.match(item.strip())
        if m is None:
            raise HostListError(f"bad range {item!r} in host list {whole!r}")
        lo_s, hi_s = m.group(1), m.group(2)
        width = len(lo_s)
        lo = int(lo_s)
        hi = int(hi_s) if hi_s is not None else lo
        if hi < lo:
            raise HostListError(f"descending range {item!r} in host list {whole!r}")
        if hi - lo >= MAX_HOSTS:
            raise HostListError(f"range {item!r} in host list {whole!r} is too large")
        out.extend(str(i).zfill(width) for i in range(lo, hi + 1))
    return out


def _expand_entry(entry: str, whole: str) -> list[str]:
    results = [""]
    rest = entry
    while rest:
        open_at = rest.find("[")
        if open_at < 0:
            results = [r + rest for r in results]
            break
        close_at = rest.find("]", open_at)
        prefix, spec = rest[:open_at], rest[open_at + 1 : close_at]
        choices = _expand_range(spec, whole)
        results = [r + prefix + c for r in results for c in choices]
        if len(results) > MAX_HOSTS:
            raise HostListError(f"host list {whole!r} expands to too many hosts")
        rest = rest[close_at + 1 :]
    return results


def expand_hostlist(text: str) -> list[str]:
    """Host names of a Slurm host list, in order, duplicates removed; [] for "None assigned".

    Raises HostListError (a ValueError) for text that is not a host list.
    """
    text = text.strip()
    if text in NO_HOSTS:
        return []
    hosts: list[str] = []
    seen: set[str] = set()
    for entry in _split_top(text):
        entry = entry.strip()
        if not entry:
            raise HostListError(f"empty entry in host list {text!r}")
        if any(ch.isspace() for ch in entry):
            raise HostListError(f"space inside host list {text!r}")
        for host in _expand_entry(entry, text):
            if not host or host in seen:
                continue
            seen.add(host)
            hosts.append(host)
    return hosts


def expand_indices(spec: str) -> list[int]:
    """`0-3,5` -> [0, 1, 2, 3, 5]; `N/A` or empty -> []. Raises ValueError."""
    spec = spec.strip()
    if spec in ("", "N/A"):
        return []
    out: list[int] = []
    for part in spec.split(","):
        lo_s, _, hi_s = part.partition("-")
        lo = int(lo_s)
        hi = int(hi_s) if hi_s else lo
        if lo < 0 or hi < lo or hi > 4096:
            raise ValueError(f"bad GPU index range {part!r}")
        out.extend(range(lo, hi + 1))
    return out


PASSED = "passed"
KILLED = "killed"
UNSUCCESSFUL = "unsuccessful"
RUNNING = "running"
PENDING = "pending"  # internal: not written

STATE_MAP: dict[str, str] = {
    "COMPLETED": PASSED,
    "CANCELLED": KILLED,
    "PREEMPTED": KILLED,
    "REVOKED": KILLED,
    "FAILED": UNSUCCESSFUL,
    "TIMEOUT": UNSUCCESSFUL,
    "NODE_FAIL": UNSUCCESSFUL,
    "OUT_OF_MEMORY": UNSUCCESSFUL,
    "BOOT_FAIL": UNSUCCESSFUL,
    "DEADLINE": UNSUCCESSFUL,
    "RUNNING": RUNNING,
    "REQUEUED": RUNNING,
    "REQUEUE_HOLD": RUNNING,
    "REQUEUE_FED": RUNNING,
    "SUSPENDED": RUNNING,
    "COMPLETING": RUNNING,
    "CONFIGURING": RUNNING,
    "RESIZING": RUNNING,
    "SIGNALING": RUNNING,
    "STAGE_OUT": RUNNING,
    "STOPPED": RUNNING,
    "SPECIAL_EXIT": RUNNING,
    "PENDING": PENDING,
    "RESV_DEL_HOLD": PENDING,
}


def map_state(raw: str) -> str | None:
    """passed | killed | unsuccessful | running | pending, or None for an unknown state."""
    word = raw.strip().split(" ", 1)[0].rstrip("+").upper()
    return STATE_MAP.get(word)
