"""The prometheus_client collector: the warehouse's figures, read at most once per
`cache_seconds`, never an error page.

The exporter starts reading the figures when it starts, and the first scrape waits for them; a
later scrape that finds them older than `cache_seconds` starts one read in a background thread
and is answered with the figures it has (their age is
`gpuwaste_figures_computed_timestamp_seconds`), so a scrape never waits for the warehouse once
the exporter has served. When the warehouse is missing, empty or unreadable, the scrape gets
`gpuwaste_up 0` and the exporter logs one line saying why (once, until the reason changes).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import polars as pl
from prometheus_client.core import Metric

from gpuwaste.errors import GpuwasteError
from gpuwaste.exporter.figures import Figures, read_figures
from gpuwaste.exporter.metrics import families

log = logging.getLogger("gpuwaste.exporter")


def _first(exc: BaseException) -> str:
    """The first line of an exception's message (its type when it has none)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class WasteCollector:
    """Collects the figures of the warehouse at `data_dir` (register it on a CollectorRegistry)."""

    def __init__(
        self,
        data_dir: Path,
        *,
        top_jobs: int = 50,
        cache_seconds: float = 60.0,
        update_interval_s: float = 300.0,
        currency: str = "USD",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.top_jobs = top_jobs
        self.cache_seconds = cache_seconds
        self.update_interval_s = update_interval_s
        self.currency = currency  # `[cost] currency`: the money series' currency label
        self.clock = clock
        self.reads = 0  # how many times the figures were read (each a full read of the warehouse)
        self._figures: Figures | None = None
        self._problem: str | None = None
        self._read_at: float | None = None
        self._lock = threading.Lock()
        self._refresher: threading.Thread | None = None
        self._closed = False

    def refresh(self) -> None:
        """Read the figures now (blocking); keep them, or the reason they could not be read."""
        with self._lock:
            self._read()

    def _read_first(self) -> None:
        """Read the figures unless another thread's read got there first."""
        with self._lock:
            if self._read_at is None:
                self._read()

    def _read(self) -> None:
        started = self.clock()
        self._read_at = started
        self.reads += 1
        try:
            figs = read_figures(self.data_dir, self.top_jobs, datetime.fromtimestamp(started, UTC))
        except GpuwasteError as exc:
            self._keep(None, str(exc))
        except (duckdb.Error, pl.exceptions.PolarsError, OSError) as exc:
            self._keep(None, f"the warehouse at {self.data_dir} could not be read: {_first(exc)}")
        except Exception as exc:  # never an error page: up 0 and the reason in the log
            self._keep(None, f"reading {self.data_dir} failed: {type(exc).__name__}: {_first(exc)}")
        else:
            self._keep(figs, None)

    def _keep(self, figs: Figures | None, problem: str | None) -> None:
        if problem is not None and problem != self._problem:
            log.warning("serving gpuwaste_up 0: %s", problem)
        elif problem is None and self._problem is not None:
            log.warning("reading the warehouse at %s again: gpuwaste_up 1", self.data_dir)
        self._figures, self._problem = figs, problem

    @property
    def reading_in_background(self) -> bool:
        """True while a background read of the figures runs."""
        return self._refresher is not None and self._refresher.is_alive()

    def wait(self) -> None:
        """Wait for the background read, if one runs, to finish."""
        refresher = self._refresher
        if refresher is not None:
            refresher.join()

    def _expired(self, now: float) -> bool:
        return self._read_at is None or now - self._read_at >= self.cache_seconds

    def start_reading(self) -> None:
        """Read the figures in a background thread (unless a read is running, or closed)."""
        if self._closed or self.reading_in_background:
            return
        self._refresher = threading.Thread(
            target=self.refresh, name="gpuwaste-refresh", daemon=True
        )
        self._refresher.start()

    def close(self, timeout_s: float) -> bool:
        """Start no more background reads and wait up to `timeout_s` for a running one; True
        when none runs. A process must not exit while one runs: the interpreter's finalization
        stops the thread inside DuckDB or Arrow, and that aborts the process (SIGABRT)."""
        self._closed = True
        refresher = self._refresher
        if refresher is not None:
            refresher.join(timeout_s)
        return not self.reading_in_background

    def collect(self) -> Iterable[Metric]:
        now = self.clock()
        if self._expired(now) and not self.reading_in_background:
            if self._read_at is None:
                self._read_first()  # nothing to serve yet: this scrape waits for the figures
            else:
                self.start_reading()
        if self._figures is None and self._problem is None:
            # the first read is running: in the background (started with the exporter), or for
            # another scrape
            self.wait()
            self._read_first()
        try:
            return families(self._figures, now, self.update_interval_s, self.currency)
        except Exception as exc:  # never an error page
            self._keep(
                None, f"the figures could not be served: {type(exc).__name__}: {_first(exc)}"
            )
            return families(None, now, self.update_interval_s, self.currency)
