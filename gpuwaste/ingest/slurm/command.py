"""Run a configured Slurm command (sacct, scontrol): its stdout, or one sentence naming it."""

from __future__ import annotations

import subprocess

from gpuwaste.ingest.base import IngestError


def run_command(argv: list[str], what: str, timeout: float, env: dict[str, str]) -> str:
    """stdout of `argv` (`what` names it in errors: "sacct", "scontrol"); IngestError when it
    is not on PATH, does not finish in `timeout` s, or exits non-zero (its last stderr line)."""
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="surrogateescape",  # a line that is not UTF-8 is refused alone (parse)
            timeout=timeout,
            env=env,
            check=False,
        )
    except FileNotFoundError:
        raise IngestError(f"the {what} command {argv[0]!r} was not found on PATH.") from None
    except subprocess.TimeoutExpired:
        raise IngestError(
            f"the {what} command {argv[0]!r} did not finish in {timeout:g} s."
        ) from None
    if proc.returncode != 0:
        detail = (proc.stderr or "").strip().splitlines()
        why = detail[-1][:300] if detail else f"exit status {proc.returncode}"
        raise IngestError(f"the {what} command {argv[0]!r} failed: {why}")
    return proc.stdout
