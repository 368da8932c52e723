"""Real components for tests: under CI (CI=true) a missing one fails the test, never skips it."""

from __future__ import annotations

import os
import shutil
import socket

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def require(binary: str) -> str:
    """Path of `binary`; fail under CI, skip elsewhere, when it is not installed."""
    path = shutil.which(binary)
    if path is None:
        msg = f"{binary} is not installed (`make test` installs Debian's package)"
        if in_ci():
            pytest.fail(msg)
        pytest.skip(msg)
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
