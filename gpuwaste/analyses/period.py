"""`--since` of `gpuwaste report`: a period start given relative to now or as a date."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from gpuwaste.errors import UsageError

RELATIVE = re.compile(r"^(\d+)([hd])$")


def since_time(text: str | None, now: datetime) -> datetime | None:
    """`24h`, `7d`, `30d` (hours or days before `now`), an ISO date (its midnight UTC) or an
    ISO timestamp (UTC unless it names a zone); None for no period."""
    if not text:
        return None
    m = RELATIVE.match(text.strip())
    if m:
        amount, unit = int(m.group(1)), m.group(2)
        return now - (timedelta(hours=amount) if unit == "h" else timedelta(days=amount))
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise UsageError(
            f"--since '{text}' is not a period: give hours or days before now (24h, 7d, 30d) "
            "or a date (2026-11-01) or time (2026-11-01T08:00)."
        ) from None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


__all__ = ["since_time"]
