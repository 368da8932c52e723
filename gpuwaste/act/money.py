"""Money in what `gpuwaste job` and `gpuwaste notify` print: shown only when `[cost]` prices GPUs.

The figures are those the analysis stored (`job_gpu_usage` / `job_usage`: `gpu_cost`,
`lost_cost`, docs/analyses.md#money), computed with the prices of its run; a figure is null where
no glob of `[cost.gpu_hour]` matches the device's model, and is then not shown.
"""

from __future__ import annotations

from gpuwaste.config import CostSettings


def shown_currency(cost: CostSettings) -> str | None:
    """The currency money is shown in: `[cost] currency` when `[cost.gpu_hour]` prices some GPU
    model; None (nothing about money is shown) without prices."""
    return cost.currency if cost.gpu_hour else None


def amount(value: float | None, currency: str | None) -> str | None:
    """`1,234.50 EUR`; None when money is not shown or the figure has no price."""
    if currency is None or value is None:
        return None
    return f"{value:,.2f} {currency}"


__all__ = ["amount", "shown_currency"]
