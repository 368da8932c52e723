"""`gpuwaste report --by user|vc|model`: GPU hours allocated, busy, idle-slot, never-used and lost
per user, per account (VC) or per GPU model over a period, the list operators ask for first.

Read from the per-job result tables (`job_gpu_usage`, `job_usage`) with
`sql/reports/waste_by.sql`, which states the period rule; per user and per VC also the GPU hours
other users' jobs waited while their GPUs were idle (`queue_idle_overlap`, read with
`sql/reports/waited_by.sql`, as `notify`'s digests read it). The model is the device's
(`job_gpu_usage.gpu_model`, `(unknown)` where no source names it).
"""

from __future__ import annotations

from datetime import datetime

import polars as pl

from gpuwaste.analyses.report import check_vc
from gpuwaste.analyses.sqlfiles import Scalar, load_sql, set_variables
from gpuwaste.config import Settings
from gpuwaste.errors import GpuwasteError, UsageError
from gpuwaste.warehouse.catalog import connect
from gpuwaste.warehouse.reading import read_frame
from gpuwaste.warehouse.results import ALL_VCS
from gpuwaste.warehouse.store import Warehouse

BY = ("user", "vc", "model")
TITLE = "GPU hours lost per {by}, most first"
BY_WORDS = {"user": "user", "vc": "VC", "model": "GPU model"}  # `by` as TITLE names it
JOBS = "the jobs with GPU time"  # what the `jobs` column counts (sql/reports/waste_by.sql)
# per user and VC, from sql/reports/waited_by.sql: the waits behind the group's idle GPUs
WAITED_COLUMNS = ("others_waited_gpu_h", "others_waits", "own_blocked_gpu_h")


def check_by(by: str) -> None:
    """Refuse a `--by` value that is not one of BY."""
    if by not in BY:
        raise UsageError(f"--by '{by}' is not one of: {', '.join(BY)}.")


def waste_by(
    settings: Settings,
    by: str,
    *,
    cluster: str | None = None,
    vc: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> pl.DataFrame:
    """One row per cluster x user (or VC, or GPU model) with GPU time in [since, until), most
    lost first;
    only the jobs of `vc` if given ('(all)': every VC)."""
    check_by(by)
    wh = Warehouse(settings.data_dir)
    if not wh.has_files("job_gpu_usage"):
        raise GpuwasteError(
            f"no job_gpu_usage table in {settings.data_dir}: run `gpuwaste analyze` first."
        )
    known = wh.clusters("job_usage")
    if cluster is not None and cluster not in known:
        raise GpuwasteError(
            f"no analyzed jobs for cluster '{cluster}' in {settings.data_dir} "
            f"(clusters: {', '.join(known)})."
        )
    con = connect(settings.data_dir)
    try:
        if vc is not None:
            check_vc(con, "job_usage", [cluster] if cluster else known, vc)
        variables: dict[str, Scalar] = {
            "waste_by": by,
            "cluster": cluster,
            "vc": None if vc == ALL_VCS else vc,
            "period_start": since,
            "period_end": until,
        }
        set_variables(con, variables)
        df = read_frame(con, load_sql("reports/waste_by"))
        if by != "model":  # idle GPUs are held by users and VCs, not by models
            waited = read_frame(con, load_sql("reports/waited_by")).select(
                "cluster", "who", *WAITED_COLUMNS
            )
            df = df.join(waited, on=["cluster", "who"], how="left")
    finally:
        con.close()
    order = ["lost_gpu_h", "cluster", "who"]
    df = with_energy_factors(df, settings)
    unpriced = [
        c
        for c in (
            "cost",
            "lost_cost",
            "energy_kwh",
            "lost_energy_kwh",
            "held_idle_energy_kwh",
            *(f[0] for f in _FACTORED),
        )
        if c in df.columns and df[c].null_count() == df.height
    ]
    # money columns only where [cost] prices some GPU; energy where some GPU reports power, its
    # CO2e and money where [energy] sets the factor or price
    df = df.drop(unpriced)
    return df.sort(order, descending=[True, False, False], nulls_last=True).rename({"who": by})


# The columns `with_energy_factors` adds: (name, the kWh column it is of, the factor per kWh).
_FACTORED = (
    ("co2e_kg", "energy_kwh", "co2e"),
    ("lost_co2e_kg", "lost_energy_kwh", "co2e"),
    ("energy_cost", "energy_kwh", "price"),
    ("lost_energy_cost", "lost_energy_kwh", "price"),
)


def with_energy_factors(df: pl.DataFrame, settings: Settings) -> pl.DataFrame:
    """`df` (a `cluster`, an `energy_kwh` and a `lost_energy_kwh` column) with `co2e_kg` and
    `lost_co2e_kg` (kWh x the cluster's `[energy]` PUE x g CO2e/kWh / 1000) and `energy_cost`
    and `lost_energy_cost` (kWh x PUE x price per kWh), as energy_daily.sql computes them per
    day: null where the factor or price is not configured."""
    factors = {c: settings.energy.factors(c) for c in df["cluster"].unique().to_list()}
    per_kwh = {
        "co2e": {
            c: None if f.co2_g_per_kwh is None else f.pue * f.co2_g_per_kwh / 1000
            for c, f in factors.items()
        },
        "price": {
            c: None if f.price_per_kwh is None else f.pue * f.price_per_kwh
            for c, f in factors.items()
        },
    }
    return df.with_columns(
        (
            pl.col(kwh)
            * pl.col("cluster").replace_strict(per_kwh[k], default=None, return_dtype=pl.Float64)
        ).alias(name)
        for name, kwh, k in _FACTORED
    )


__all__ = ["BY", "TITLE", "check_by", "waste_by", "with_energy_factors"]
