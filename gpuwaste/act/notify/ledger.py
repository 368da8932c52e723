"""The `notifications` ledger: one row per message, written before and after each delivery.

Key: (recipient, channel, window_start, window_end, content_hash), one file per cluster
(`notifications/cluster=<c>/ledger.parquet`, rewritten atomically). Statuses:

- `sending`: delivery started; the server cannot hold a complete message yet (for email: the
  end of the message has not been sent). A later run sends it again.
- `unconfirmed`: the complete message reached the server but no answer was recorded (the run
  was killed, or the connection dropped, while the server answered). It may have been accepted,
  so a later run does not send it again unless told to (`--resend-unconfirmed`).
- `sent`: the server accepted it. Never sent again.
- `failed`: the server refused it, or could not be reached. A later run tries again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl

from gpuwaste.warehouse.store import Warehouse

TABLE = "notifications"
FILE_KEY = "ledger"
SENDING, UNCONFIRMED, SENT, FAILED = "sending", "unconfirmed", "sent", "failed"
COUNTED = (SENDING, UNCONFIRMED, SENT)  # what the rate limit counts


@dataclass(frozen=True)
class Entry:
    """What the ledger knows of one message before it is (re)sent."""

    recipient: str
    channel: str
    window_start: datetime
    window_end: datetime
    content_hash: str
    kind: str
    about: str
    job_ids: tuple[str, ...]

    def key_filter(self) -> pl.Expr:
        return (
            (pl.col("recipient") == self.recipient)
            & (pl.col("channel") == self.channel)
            & (pl.col("window_start") == self.window_start)
            & (pl.col("window_end") == self.window_end)
            & (pl.col("content_hash") == self.content_hash)
        )


class Ledger:
    """The ledger of one cluster, read once and kept in step with every write."""

    def __init__(self, data_dir: Path, cluster: str) -> None:
        self.wh = Warehouse(data_dir)
        self.cluster = cluster
        self.rows = self.wh.read(TABLE, cluster, FILE_KEY)

    def find(self, entry: Entry) -> dict[str, Any] | None:
        hit = self.rows.filter(entry.key_filter())
        return hit.row(0, named=True) if hit.height else None

    def record(
        self, entry: Entry, status: str, message_id: str | None, detail: str | None = None
    ) -> None:
        """Write the message's row with `status` (durably, before returning)."""
        old = self.find(entry)
        attempts = (old["attempts"] or 0) if old else 0
        if status in (SENDING,) or (status == UNCONFIRMED and old and old["status"] != SENDING):
            attempts += 1
        row = pl.DataFrame(
            {
                "recipient": [entry.recipient],
                "channel": [entry.channel],
                "window_start": [entry.window_start],
                "window_end": [entry.window_end],
                "content_hash": [entry.content_hash],
                "kind": [entry.kind],
                "about": [entry.about],
                "job_ids": [",".join(entry.job_ids)],
                "status": [status],
                "message_id": [message_id],
                "attempts": [max(attempts, 1)],
                "detail": [detail],
                "updated_at": [datetime.now(UTC)],
            }
        )
        self.wh.upsert(TABLE, self.cluster, FILE_KEY, row)
        self.rows = self.wh.read(TABLE, self.cluster, FILE_KEY)

    def recent(self, recipient: str, channel: str, hours: float, now: datetime) -> int:
        """Messages to (recipient, channel) sent or under way in the last `hours`."""
        since = now - timedelta(hours=hours)
        return self.rows.filter(
            (pl.col("recipient") == recipient)
            & (pl.col("channel") == channel)
            & pl.col("status").is_in(COUNTED)
            & (pl.col("updated_at") >= since)
        ).height


__all__ = ["COUNTED", "FAILED", "SENDING", "SENT", "UNCONFIRMED", "Entry", "Ledger"]
