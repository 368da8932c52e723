"""Run Python code in a fresh interpreter (what a new `gpuwaste` process imports, or prints), with
this test run's import path."""

from __future__ import annotations

import os
import subprocess
import sys


def fresh_python(code: str, timeout_s: float = 120) -> str:
    """The standard output of `python -c code` in a new interpreter; a failure raises."""
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        check=True,
    )
    return done.stdout
