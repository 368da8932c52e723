"""Real components for tests: under CI (CI=true) a missing one fails the test, never skips it."""

from __future__ import annotations

import importlib
import os
import shutil
import socket
from types import ModuleType
from typing import NoReturn

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def missing(msg: str) -> NoReturn:
    """A component the test needs is missing: fail under CI, skip elsewhere."""
    if in_ci():
        pytest.fail(msg)
    pytest.skip(msg)


def require(binary: str) -> str:
    """Path of `binary`; fail under CI, skip elsewhere, when it is not installed."""
    path = shutil.which(binary)
    if path is None:
        missing(f"{binary} is not installed (`make test` installs Debian's package)")
    return path


def require_module(name: str, hint: str) -> ModuleType:
    """The Python module `name`, imported; fail under CI, skip elsewhere, when it is not
    installed (`hint`: what it is and what installs it, e.g. "pyspark is not installed (pip
    install -e '.[dev]' installs it)")."""
    try:
        return importlib.import_module(name)
    except ImportError:
        missing(hint)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
