"""The one base class of errors meant for the operator: the CLI prints them as one sentence."""

from __future__ import annotations

import socket


class GpuwasteError(Exception):
    """An error whose message is a complete sentence naming what and where; no traceback."""


class UsageError(GpuwasteError):
    """The command line itself is wrong: a flag's value the flag never accepts, or flags that
    do not go together. The command exits with status 2, click's status for a usage error (as
    for a value click refuses itself, e.g. `--format jsn`); other errors exit with 1."""


class MachineError(GpuwasteError):
    """The machine, not the data, stops a batch (a temporary folder that cannot be written): the
    batch fails as a whole, instead of its jobs being tried apart."""


class DamagedFileError(GpuwasteError):
    """A warehouse file that cannot be read (`warehouse.damaged`): a batch that meets one fails
    as a whole, instead of its jobs being tried apart (every job of those days would fail)."""


class WarehouseError(GpuwasteError):
    """A warehouse read or write failed; the message names the path and the cause."""


class DiskError(WarehouseError, MachineError):
    """A write the disk refused: full, over its quota, or read-only (`warehouse.disk`). The
    message names the disk and the folder. A batch that meets one fails as a whole, and analyze
    stops at it: every other job, batch and cluster would meet the same disk."""


def network_reason(exc: BaseException) -> str:
    """Why a connection failed, in a few words for a sentence ("the host name does not resolve
    (Name or service not known)", "connection refused"): the root cause found along the chain of
    causes (requests wraps urllib3's errors, which wrap the socket's), never an exception's
    repr."""
    seen: set[int] = set()
    current: BaseException | None = exc
    deepest: OSError | None = None
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, socket.gaierror):
            return f"the host name does not resolve ({current.strerror})"
        if isinstance(current, ConnectionRefusedError):
            return "connection refused"
        if isinstance(current, TimeoutError):
            return "no answer in time"
        if isinstance(current, OSError) and current.strerror:
            deepest = current
        reason = getattr(current, "reason", None)  # urllib3's MaxRetryError
        first = current.args[0] if current.args else None
        current = next(
            (
                e
                for e in (reason, current.__cause__, current.__context__, first)
                if isinstance(e, BaseException)
            ),
            None,
        )
    if deepest is not None:
        return str(deepest.strerror)
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:200]
