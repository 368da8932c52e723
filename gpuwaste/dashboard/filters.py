"""The view's filters (cluster, VC, GPU model, period, user, job size, state) and the SQL they
become.

Pure: no Streamlit here. `Filters.from_state` reads the widget values (whose keys are also the
URL query parameters, see `widgets.sidebar_filters`), and the `*_where` methods turn them into
parameterized WHERE clauses over the result tables' columns.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from gpuwaste.warehouse.results import ALL_MODELS, ALL_VCS, SIZE_CLASSES

STATES = ("passed", "killed", "unsuccessful", "running")

# Widget keys, which are also the URL query parameter names.
CLUSTER, VC, PERIOD, USER, SIZE, STATE = "cluster", "vc", "period", "user", "size", "state"
MODEL = "model"  # the job's GPU model (job_usage.gpu_model; the summaries' gpu_model)
FILTER_KEYS = (CLUSTER, VC, MODEL, PERIOD, USER, SIZE, STATE)


def in_list(column: str, values: Sequence[object]) -> str:
    """`column IN (?, ?, ...)`, one parameter per value: the values are passed, never spliced."""
    return f"{column} IN ({', '.join('?' * len(values))})"


def file_part(text: str) -> str:
    """Text made safe for a file name: runs of anything but ASCII letters, digits and '-' become
    one '-'."""
    return re.sub(r"[^A-Za-z0-9-]+", "-", text).strip("-") or "x"


@dataclass(frozen=True)
class Filters:
    """One view of the warehouse. Empty tuples and None mean "no restriction"."""

    cluster: str | None = None
    vcs: tuple[str, ...] = ()
    start: date | None = None  # first UTC day of the period
    end: date | None = None  # last UTC day of the period (inclusive)
    user: str | None = None
    sizes: tuple[str, ...] = ()
    states: tuple[str, ...] = ()
    models: tuple[str, ...] = ()  # jobs' GPU models (job_usage.gpu_model)

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> Filters:
        period = state.get(PERIOD) or ()
        if isinstance(period, date):
            period = (period,)
        days = [d for d in period if isinstance(d, date)]
        user = (state.get(USER) or "").strip() or None
        return cls(
            cluster=state.get(CLUSTER) or None,
            vcs=tuple(state.get(VC) or ()),
            models=tuple(state.get(MODEL) or ()),
            start=days[0] if days else None,
            end=days[-1] if days else None,
            user=user,
            sizes=tuple(s for s in state.get(SIZE) or () if s in SIZE_CLASSES),
            states=tuple(s for s in state.get(STATE) or () if s in STATES),
        )

    # ------------------------------------------------------------ derived
    @property
    def period_start(self) -> datetime | None:
        return datetime.combine(self.start, time(), UTC) if self.start else None

    @property
    def period_end(self) -> datetime | None:
        """Exclusive end of the period: midnight after its last day."""
        return datetime.combine(self.end, time(), UTC) + timedelta(days=1) if self.end else None

    @property
    def summary_vcs(self) -> tuple[str, ...]:
        """VC values to read from summary tables: the selected VCs, else the all-VCs rows."""
        return self.vcs or (ALL_VCS,)

    @property
    def summary_models(self) -> tuple[str, ...]:
        """GPU model values to read from summary tables: the selected models, else the
        all-models rows."""
        return self.models or (ALL_MODELS,)

    @property
    def job_filters_active(self) -> bool:
        """True when a filter applies that summary tables (per cluster x VC) cannot honor."""
        return bool(self.user or self.sizes or self.states or self.start or self.end)

    def place(self) -> Filters:
        """The view narrowed to where jobs ran: its cluster and VCs, no other filter (for tables
        without the jobs' other columns)."""
        return Filters(cluster=self.cluster, vcs=self.vcs)

    def running_now(self) -> Filters:
        """The view for jobs running now (the "Running now" page): without the period and state
        filters, which cannot apply to them."""
        return replace(self, start=None, end=None, states=())

    def describe(self) -> str:
        parts = [f"cluster {self.cluster}" if self.cluster else "all clusters"]
        parts.append(f"VC {', '.join(self.vcs)}" if self.vcs else "all VCs")
        if self.models:
            parts.append(f"GPU model {', '.join(self.models)}")
        if self.start:
            parts.append(f"{self.start} to {self.end}")
        if self.user:
            parts.append(f"user {self.user}")
        if self.sizes:
            parts.append(f"size {', '.join(self.sizes)}")
        if self.states:
            parts.append(f"state {', '.join(self.states)}")
        return "; ".join(parts)

    def slug(self) -> str:
        """The view for a file name: `cluster-demo_vc-nlp-vision_2026-10-01-to-2026-10-03_user-a`
        (`all-clusters` when nothing is set), each part through `file_part`."""
        parts = [f"cluster {self.cluster}" if self.cluster else "all clusters"]
        if self.vcs:
            parts.append("vc " + " ".join(self.vcs))
        if self.models:
            parts.append("model " + " ".join(self.models))
        if self.start:
            parts.append(f"{self.start} to {self.end}")
        if self.user:
            parts.append(f"user {self.user}")
        if self.sizes:
            parts.append("size " + " ".join(self.sizes))
        if self.states:
            parts.append("state " + " ".join(self.states))
        return "_".join(file_part(p) for p in parts)

    # ------------------------------------------------------------ SQL
    def jobs_where(self, prefix: str = "", vc: str = "vc") -> tuple[str, list[Any]]:
        """WHERE clause over job_usage (or any table with its columns), jobs overlapping the
        period. `vc`: the column the VC filter reads (a table whose VC is another's)."""
        p = f"{prefix}." if prefix else ""
        clauses: list[str] = []
        params: list[Any] = []
        if self.cluster:
            clauses.append(f"{p}cluster = ?")
            params.append(self.cluster)
        if self.period_start is not None and self.period_end is not None:
            clauses.append(f"{p}start_ts < ? AND coalesce({p}end_ts, {p}start_ts) >= ?")
            params.extend([self.period_end, self.period_start])
        if self.user:
            clauses.append(f'{p}"user" = ?')
            params.append(self.user)
        for column, values in (
            (vc, self.vcs),
            ("gpu_model", self.models),
            ("size_class", self.sizes),
            ("state", self.states),
        ):
            if values:
                clauses.append(in_list(p + column, values))
                params.extend(values)
        return (" AND ".join(clauses) or "true"), params

    def summary_where(self, *, days: bool = False, by_model: bool = False) -> tuple[str, list[Any]]:
        """WHERE clause over a summary table (cluster, vc, gpu_model[, day]). `by_model`: a table
        whose rows are per model (waste_by_model), every model shown when none is selected."""
        clauses: list[str] = []
        params: list[Any] = []
        if self.cluster:
            clauses.append("cluster = ?")
            params.append(self.cluster)
        vcs = self.summary_vcs
        clauses.append(in_list("vc", vcs))
        params.extend(vcs)
        if self.models or not by_model:
            models = self.summary_models
            clauses.append(in_list("gpu_model", models))
            params.extend(models)
        if days and self.start and self.end:
            clauses.append("day BETWEEN ? AND ?")
            params.extend([self.start, self.end])
        return " AND ".join(clauses), params
