"""Run Python code in a fresh interpreter (what a new `gpuwaste` process imports, or prints), with
this test run's import path."""

from __future__ import annotations

import os
import subprocess
import sys


def run_fresh(
    code: str, env: dict[str, str] | None = None, timeout_s: float = 120
) -> subprocess.CompletedProcess[str]:
    """`python -c code` in a new interpreter, with `env` (default: this process's environment)
    and this test run's import path; a failure raises."""
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**(os.environ if env is None else env), "PYTHONPATH": os.pathsep.join(sys.path)},
        check=True,
    )


def fresh_python(code: str, timeout_s: float = 120) -> str:
    """The standard output of `python -c code` in a new interpreter; a failure raises."""
    return run_fresh(code, timeout_s=timeout_s).stdout
