"""Watermarks (`ingest_state`) and refused records (`quarantine`), shared by every ingestor."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import polars as pl

from gpuwaste.warehouse.store import Warehouse, atomic_copy_parquet, sql_string

STATE_KEY = "state"
QUARANTINE_KEY = "records"
# Job logs' source: its watermark is when the newest log file was written (its mtime), not how
# far the cluster's records reach in time; a file touched today of a job that ended a month ago
# says nothing about how fresh the data are (analyses.freshness leaves it out of that judgement)
LOGS_SOURCE = "logs"


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
    if not refused and not (wh.cluster_file("quarantine", cluster, QUARANTINE_KEY)).exists():
        return 0
    return wh.replace_rows_where("quarantine", cluster, QUARANTINE_KEY, match, rows)


def write_quarantine_staged(
    wh: Warehouse, cluster: str, source: str, batch: str, parts: Sequence[Path], tmp: Path
) -> int:
    """`write_quarantine` for refused records staged in parquet files (columns location, reason,
    raw): DuckDB merges them into the quarantine file, streamed and spilling to `tmp` past
    512 MB, so that millions of them (a file of garbage) never sit in memory at once."""
    dest = wh.cluster_file("quarantine", cluster, QUARANTINE_KEY)
    if not parts and not dest.exists():
        return 0
    tmp.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect()
    try:
        con.execute(f"set memory_limit = '512MB'; set temp_directory = {sql_string(tmp)}")
        cols = "source, batch, location, reason, raw, ingested_at"
        selects = []
        if parts:
            files = ", ".join(sql_string(p) for p in parts)
            selects.append(
                "select $1::varchar as source, $2::varchar as batch, location, reason, raw, "
                f"$3::timestamptz as ingested_at from read_parquet([{files}])"
            )
        if dest.exists():
            selects.append(
                f"select {cols} from read_parquet({sql_string(dest)}, hive_partitioning = false) "
                "where not (source = $1 and batch = $2)"
            )
        query = " union all ".join(selects) + " order by source, batch, location"
        params: list[object] = [source, batch]
        if parts:
            params.append(datetime.now(UTC))
        atomic_copy_parquet(con, query, dest, params)
        if not parts:
            return 0
        row = con.execute(f"select count(*) from read_parquet([{files}])").fetchone()
        return int(row[0]) if row else 0
    finally:
        con.close()


def summarize_refused(
    accepted: int, refused: list[Refused], by_reason: dict[str, int] | None = None
) -> str:
    """The one line every ingest run ends with: N accepted, M quarantined (by reason).
    `by_reason`: the counts, when `refused` holds only the first records."""
    counts: dict[str, int] = dict(by_reason) if by_reason is not None else {}
    if by_reason is None:
        for r in refused:
            key = r.reason.split(":", 1)[0]
            counts[key] = counts.get(key, 0) + 1
    total = sum(counts.values())
    if not total:
        return f"{accepted} records accepted, 0 quarantined"
    parts = ", ".join(f"{n} {k}" for k, n in sorted(counts.items(), key=lambda kv: -kv[1]))
    return f"{accepted} records accepted, {total} quarantined ({parts})"
