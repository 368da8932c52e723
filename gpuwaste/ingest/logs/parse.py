"""Job log files: which job and attempt a file name is, and the text of a log's tail. Pure.

A file name maps to a job by the configured pattern (`[clusters.logs] pattern`), a regex with
the group `job` (the job id as the scheduler shows it: `123`, or `123_4` for an array task) and
optionally `attempt`. A name without an attempt has none (null): Slurm's own default names,
`slurm-%j.out` and `slurm-%A_%a.out` (and `.err`), taken by the default pattern (their job part is
the JobID as sacct prints it), are one file for all the runs of a requeued job, and its end, where
the error is, was written by the last run (docs/ingest-files.md#job-logs). A name ending `.gz` is
matched without it too. A log is decoded as UTF-8 with bytes of another encoding replaced
(U+FFFD), never refused: an error message is still found around them.
"""

from __future__ import annotations

import re
from typing import NamedTuple


class LogName(NamedTuple):
    job_key: str
    attempt: int | None  # None: the name gives none (the job's last run wrote its end)


def log_name(name: str, pattern: re.Pattern[str]) -> LogName | None:
    """The job and attempt of a file name, or None when the pattern does not match it. A
    compressed log's name (`slurm-123.out.gz`) is matched without its `.gz` when the pattern
    does not take it as it is."""
    m = pattern.search(name)
    if m is None and name.endswith(".gz"):
        m = pattern.search(name.removesuffix(".gz"))
    if m is None or not m.group("job"):
        return None
    attempt = m.groupdict().get("attempt")
    return LogName(m.group("job"), int(attempt) if attempt else None)


def tail_text(data: bytes, from_start: bool) -> str:
    """The text of a log's bytes; when they are a tail (`from_start` false), without the first,
    likely partial, line. A last line without a newline is kept."""
    if not from_start:
        nl = data.find(b"\n")
        data = data[nl + 1 :] if nl >= 0 else data  # one line longer than the tail: kept
    return data.decode("utf-8", errors="replace")
