"""The rule a replay applies, and the pure parsing of its command-line values."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from gpuwaste.errors import UsageError

MAX_THRESHOLDS = 50


class Only(StrEnum):
    """Which jobs the idle rule may cancel (docs/analyses.md#replaying-enforcement-rules)."""

    debugging = "debugging"  # declared or inferred debugging (job_usage.is_debug)
    interactive = "interactive"  # declared by the scheduler (job_usage.is_debug_declared)
    all = "all"


@dataclass(frozen=True)
class Rule:
    """Cancel a job at the first moment t >= start + grace at which every GPU it holds has been
    idle for the last H hours, for each H in `idle_hours` (a sweep); interactive jobs are also
    cancelled once they have run `max_interactive_hours`."""

    idle_hours: tuple[float, ...]
    grace_minutes: float = 0.0
    only: Only = Only.all
    max_interactive_hours: float | None = None

    @property
    def grace_s(self) -> float:
        return self.grace_minutes * 60

    @property
    def max_interactive_s(self) -> float | None:
        h = self.max_interactive_hours
        return None if h is None else h * 3600


def _positive(flag: str, text: str, *, zero_ok: bool = False) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
        least = "0 or more" if zero_ok else "greater than 0"
        raise UsageError(f"{flag} '{text}' is not accepted: it must be a number {least}.")
    return value


def parse_idle_hours(values: list[str]) -> tuple[float, ...]:
    """`--idle-hours` values, each one number or a comma-separated list (`0.5,1,2`): the sorted,
    distinct thresholds in hours."""
    parts = [p.strip() for v in values for p in v.split(",")]
    if not parts or any(p == "" for p in parts):
        raise UsageError(
            "--idle-hours is needed: give one or more numbers of hours, e.g. --idle-hours 1,2,4."
        )
    hours = sorted({_positive("--idle-hours", p) for p in parts})
    if len(hours) > MAX_THRESHOLDS:
        raise UsageError(
            f"--idle-hours gives {len(hours)} thresholds: at most {MAX_THRESHOLDS} are accepted."
        )
    return tuple(hours)


def make_rule(
    idle_hours: list[str],
    grace_minutes: float = 0.0,
    only: str = "all",
    max_interactive_hours: float | None = None,
) -> Rule:
    """A Rule from the command line's values; a wrong one is refused in one sentence."""
    if only not in Only.__members__:
        raise UsageError(
            f"--only '{only}' is not accepted: it must be one of {', '.join(Only.__members__)}."
        )
    grace = _positive("--grace-minutes", str(grace_minutes), zero_ok=True)
    cap = (
        None
        if max_interactive_hours is None
        else _positive("--max-interactive-hours", str(max_interactive_hours))
    )
    return Rule(parse_idle_hours(idle_hours), grace, Only(only), cap)


__all__ = ["MAX_THRESHOLDS", "Only", "Rule", "make_rule", "parse_idle_hours"]
