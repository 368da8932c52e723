"""Watermarks (`ingest_state`) and refused records (`quarantine`), shared by every ingestor."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import polars as pl

from gpuwaste.warehouse.store import Warehouse

STATE_KEY = "state"
QUARANTINE_KEY = "records"


@dataclass(frozen=True)
class Refused:
    """One input record that was not accepted: where it was, why, and its raw text."""

    location: str
    reason: str
    raw: str


def get_watermark(wh: Warehouse, cluster: str, source: str) -> datetime | None:
    df = wh.read("ingest_state", cluster, STATE_KEY).filter(pl.col("source") == source)
    if df.height == 0:
        return None
    value = df["watermark"][0]
    return value if isinstance(value, datetime) else None


def set_watermark(
    wh: Warehouse,
    cluster: str,
    source: str,
    watermark: datetime,
    detail: dict[str, Any] | None = None,
) -> None:
    """Advance (or set) the watermark; call only after the data up to it is durably written."""
    row = pl.DataFrame(
        {
            "source": [source],
            "watermark": [watermark.astimezone(UTC)],
            "updated_at": [datetime.now(UTC)],
            "detail": [json.dumps(detail or {}, sort_keys=True, default=str)],
        }
    )
    wh.upsert("ingest_state", cluster, STATE_KEY, row)


def write_quarantine(
    wh: Warehouse, cluster: str, source: str, batch: str, refused: list[Refused]
) -> int:
    """Replace the quarantine rows of one (source, batch) so a re-run never duplicates them."""
    now = datetime.now(UTC)
    rows = pl.DataFrame(
        {
            "source": [source] * len(refused),
            "batch": [batch] * len(refused),
            "location": [r.location for r in refused],
            "reason": [r.reason for r in refused],
            "raw": [r.raw[:4096] for r in refused],
            "ingested_at": [now] * len(refused),
        },
        schema_overrides={"ingested_at": pl.Datetime("us", "UTC")},
    )
    match = (pl.col("source") == source) & (pl.col("batch") == batch)
    if (
        not refused
        and not (wh.cluster_dir("quarantine", cluster) / f"{QUARANTINE_KEY}.parquet").exists()
    ):
        return 0
    return wh.replace_rows_where("quarantine", cluster, QUARANTINE_KEY, match, rows)


def summarize_refused(accepted: int, refused: list[Refused]) -> str:
    """The one line every ingest run ends with: N accepted, M quarantined (by reason)."""
    if not refused:
        return f"{accepted} records accepted, 0 quarantined"
    counts: dict[str, int] = {}
    for r in refused:
        key = r.reason.split(":", 1)[0]
        counts[key] = counts.get(key, 0) + 1
    parts = ", ".join(f"{n} {k}" for k, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    return f"{accepted} records accepted, {len(refused)} quarantined ({parts})"
