"""Money: what GPU time costs under `[cost]`, for the report, the dashboard and other features
(notices, the exporter) that want wasted money beside wasted GPU hours.

Prices are per whole-GPU hour by GPU model (`[cost.gpu_hour]`, model globs, the first match
wins). GPU hours are slice-weighted (a `1g.10gb` MIG instance hour is 1/7 of a GPU hour), so a
MIG instance is priced by its slice: `money(hours, model, cost)` with the weighted hours. The
analysis stores the same figures (`job_gpu_usage` / `job_usage`: `gpu_cost`, `lost_cost`;
`waste_by_model`: `cost`, `lost_cost`), computed with the prices of its run
(docs/analyses.md#money).
"""

from __future__ import annotations

from datetime import datetime
from fnmatch import fnmatchcase

import polars as pl

from gpuwaste.analyses.waste_by import waste_by
from gpuwaste.config import CostSettings, Settings


def price_per_gpu_hour(cost: CostSettings, model: str | None) -> float | None:
    """The price of one whole-GPU hour of `model`: the first `[cost.gpu_hour]` glob matching it
    (case-sensitive, as DuckDB's GLOB in the analysis); None when none matches."""
    for pattern, price in cost.gpu_hour.items():
        if fnmatchcase(model or "", pattern):
            return float(price)
    return None


def money(gpu_hours: float, model: str | None, cost: CostSettings) -> float | None:
    """What `gpu_hours` GPU hours (slice-weighted) of `model` cost; None without a price."""
    price = price_per_gpu_hour(cost, model)
    return None if price is None else gpu_hours * price


def wasted_money(
    settings: Settings,
    by: str = "user",
    *,
    cluster: str | None = None,
    vc: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> pl.DataFrame:
    """`gpuwaste report --by` as a frame, one row per cluster x `by` (user, vc or model), with
    `lost_gpu_h` and, when `[cost]` prices the GPUs, `cost` and `lost_cost` (in
    `settings.cost.currency`), most lost first. The prices are those of the last analysis."""
    return waste_by(settings, by, cluster=cluster, vc=vc, since=since, until=until)


__all__ = ["money", "price_per_gpu_hour", "wasted_money"]
