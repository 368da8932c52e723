"""The times a source believes, and samples repeated with other values (pure).

One rule for every source, applied where its rows are built: the Prometheus and OpenMetrics
row builders (`prometheus.rows`), the CSV / parquet mapping (`tabular.parse`), the Philly job
log and utilization files (`philly.parse`, `philly.source`) and sacct (`slurm.parse`). A time
is refused, with the first of these reasons that applies:

1. **outside the warehouse's days**: before 0001-01-02 or from 9999-12-30 on. The warehouse
   files samples by UTC day and a window's days are counted one after the other, so the last
   day must have a next one (Python's dates end at 9999-12-31); this holds whatever the
   settings;
2. **from the future**: later than the ingest run plus `[ingest] future_tolerance_s` (10 min): a
   node whose clock is ahead. A running job is counted up to the newest data of its cluster, so
   one sample dated 2200 made every running job end in 2200;
3. **from the distant past**: before `[ingest] earliest_time` (2010-01-01): a clock that was
   reset (a dead RTC battery restarts at 1970-01-01 or 2000-01-01).

For a saved file, "the ingest" is the run reading it, not the file's date. `TimeBounds()` alone
is rule 1: what a parser checks when its caller gives no settings.

Two readings of one device at one instant with different values (files concatenated, two
exporters on a node) cannot both be true: one is kept and each other one is refused
(`conflicting_duplicates`); an exact repeat loses nothing and is dropped without a record.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal

import polars as pl

from gpuwaste.config import IngestSettings
from gpuwaste.warehouse.bookkeeping import Refused

FIRST_FILEABLE = datetime(1, 1, 2, tzinfo=UTC)  # inclusive
LAST_FILEABLE = datetime(9999, 12, 30, tzinfo=UTC)  # exclusive: its day needs a next day

UNFILEABLE = "outside the warehouse's days"
FUTURE = "from the future"
PAST = "from the distant past"


def fmt(ts: datetime) -> str:
    """A time as the reasons write it (UTC, to the second)."""
    return ts.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


@dataclass(frozen=True)
class TimeBounds:
    """Times from `earliest` to `latest` (inclusive) are believed; see the module docstring.
    `ingested_at` and `tolerance` only name the cause in the reasons."""

    earliest: datetime = FIRST_FILEABLE
    latest: datetime = LAST_FILEABLE - timedelta(microseconds=1)
    ingested_at: datetime | None = None
    tolerance: timedelta = timedelta(0)

    @classmethod
    def at(cls, now: datetime, settings: IngestSettings) -> TimeBounds:
        """The bounds of an ingest run that starts at `now`."""
        tolerance = timedelta(seconds=settings.future_tolerance_s)
        latest = LAST_FILEABLE - timedelta(microseconds=1)
        if tolerance < latest - now.astimezone(UTC):  # (a sum could pass year 9999)
            latest = now.astimezone(UTC) + tolerance
        return cls(max(settings.earliest_time, FIRST_FILEABLE), latest, now, tolerance)

    def _future(self) -> str:
        if self.ingested_at is None:
            return f"{FUTURE}: later than {fmt(self.latest)}"
        minutes = self.tolerance.total_seconds() / 60
        return (
            f"{FUTURE}: later than {fmt(self.latest)}, the ingest at {fmt(self.ingested_at)} "
            f"plus {minutes:g} min ([ingest] future_tolerance_s)"
        )

    def _past(self) -> str:
        return (
            f"{PAST}: before {fmt(self.earliest)} ([ingest] earliest_time; a reset clock "
            "shows 1970 or 2000)"
        )

    @staticmethod
    def _unfileable() -> str:
        return f"{UNFILEABLE}: not from {FIRST_FILEABLE:%Y-%m-%d} to {LAST_FILEABLE:%Y-%m-%d}"

    def problem(self, ts: datetime | None) -> str | None:
        """Why `ts` is not believed, or None (None for no time)."""
        if ts is None:
            return None
        t = _utc(ts)
        if not FIRST_FILEABLE <= t < LAST_FILEABLE:
            return self._unfileable()
        if t > self.latest:
            return self._future()
        if t < self.earliest:
            return self._past()
        return None

    def problem_expr(self, ts: pl.Expr, host: pl.Expr | None = None) -> pl.Expr:
        """`problem` as a polars expression over a UTC time column: a reason or null; with
        `host`, the reason names the row's host ('from the future: host H, later than ...')."""

        def said(reason: str) -> pl.Expr:
            if host is None:
                return pl.lit(reason)
            why, _, detail = reason.partition(": ")
            return pl.concat_str([pl.lit(f"{why}: host "), host, pl.lit(f", {detail}")])

        return (
            pl.when((ts < FIRST_FILEABLE) | (ts >= LAST_FILEABLE))
            .then(said(self._unfileable()))
            .when(ts > self.latest)
            .then(said(self._future()))
            .when(ts < self.earliest)
            .then(said(self._past()))
            .otherwise(pl.lit(None, dtype=pl.String()))
        )

    def split(
        self, df: pl.DataFrame, ts: str = "ts", reason: str = "reason", host: str | None = None
    ) -> tuple[pl.DataFrame, pl.DataFrame]:
        """(the rows of `df` whose `ts` is believed, the others with a `reason` column, which
        names the row's `host` column when given)."""
        within = (pl.col(ts) >= self.earliest) & (pl.col(ts) <= self.latest)
        if df.height == 0 or df.select(within.all()).item():
            return df, df.clear().with_columns(pl.lit(None, dtype=pl.String()).alias(reason))
        named = pl.col(host) if host is not None else None
        marked = df.with_columns(self.problem_expr(pl.col(ts), named).alias(reason))
        bad = marked.filter(pl.col(reason).is_not_null())
        return marked.filter(pl.col(reason).is_null()).drop(reason), bad


def _utc(ts: datetime) -> datetime:
    return ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts.astimezone(UTC)


def with_host(reason: str, host: str, first: datetime, last: datetime, n: int) -> str:
    """`reason` for `n` samples of `host` from `first` to `last`: '<why>: N sample(s) of host H
    at T' (or 'from T1 to T2'), the host named as the cause."""
    when = f"at {fmt(first)}" if first == last else f"from {fmt(first)} to {fmt(last)}"
    why, _, detail = reason.partition(": ")
    return f"{why}: {n} sample(s) of host {host} {when}, {detail}"


def conflicting_duplicates(
    rows: pl.DataFrame, key: list[str], values: list[str], keep: Literal["first", "last"] = "first"
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """One row per `key` (the `keep` one of each, in the frame's order), and the rows left out
    whose `values` differ from the kept row's: two readings of one GPU at one instant, where at
    most one can be true. Exact repeats (a file concatenated twice) are dropped silently."""
    if rows.height < 2 or not rows.select(pl.struct(key).is_duplicated().any()).item():
        return rows, rows.clear()
    kept = rows.unique(subset=key, keep=keep, maintain_order=True)
    versions = rows.unique(subset=key + values, keep="first", maintain_order=True)
    if versions.height == kept.height:
        return kept, rows.clear()
    others = versions.join(kept, on=key + values, how="anti", nulls_equal=True)
    return kept, others


def duplicate_reason(keep: str = "first") -> str:
    """Why a reading `conflicting_duplicates` left out is refused."""
    return (
        "conflicting duplicate: another reading of the same device at the same time, with "
        f"another value, was kept (the {keep} one read)"
    )


def refuse_duplicates(
    others: pl.DataFrame, key: list[str], values: list[str], source: str, keep: str = "first"
) -> list[Refused]:
    """One refused record per reading `conflicting_duplicates` left out."""
    out = []
    for row in others.select(*key, *values).iter_rows(named=True):
        where = ", ".join(f"{k}={_show(row[k])}" for k in key)
        raw = ", ".join(f"{v}={_show(row[v])}" for v in values if row[v] is not None)
        out.append(Refused(f"{source}: {where}", duplicate_reason(keep), raw))
    return out


def _show(value: object) -> str:
    return value.isoformat() if isinstance(value, datetime) else str(value)


def latest_job_time(jobs: pl.DataFrame) -> datetime | None:
    """The newest submit, start or end time of `jobs` (a `jobs` frame): how far a source of job
    records has read, its watermark; None without jobs."""
    if jobs.height == 0:
        return None
    stamps = jobs.select(
        pl.max_horizontal(pl.col("submit_ts"), pl.col("start_ts"), pl.col("end_ts")).max()
    ).item()
    return stamps if isinstance(stamps, datetime) else None
