"""The models' idle power for the power arm of "looks busy" (#44, docs/definitions.md#looks-busy):
measured once per `analyze` run, before the per-job batches, by the `idle_power` analysis's own
query (one definition: docs/definitions.md#idle-power), and handed to every batch as the SQL
variables staging/alloc_models.sql reads (each allocation's idle power, which looks_busy.py
judges by). The same run writes these rows as the `idle_power` table, not measured twice.

Not part of the run's fingerprint of thresholds: the estimate moves a little with every ingest,
and a changed fingerprint rebuilds every job. A job is judged against the estimate of the run
that (re)computed it.
"""

from __future__ import annotations

import duckdb
import polars as pl

from gpuwaste.analyses.registry import BY_NAME
from gpuwaste.analyses.sqlfiles import Scalar, set_variables, threshold_variables
from gpuwaste.config import Thresholds

MODELS = "idle_power_models"  # the models with an idle power measured (varchar[])
WATTS = "idle_power_watts"  # ... and that power, W (double[], in the same order)
# Its time in a run's per-step seconds (ClusterRun.seconds), beside the batches' steps (the
# evidence itself is gathered in the per-job pass, looks_busy.py).
IDLE_POWER_STEP = "idle power (looks_busy)"


def idle_power(
    con: duckdb.DuckDBPyConnection, cluster: str, thresholds: Thresholds
) -> pl.DataFrame:
    """The `idle_power` analysis's rows of `cluster`. `con` must see the cluster's gpu_samples
    and the cluster's device variables (gpu_models patterns)."""
    set_variables(con, {**threshold_variables(thresholds), "cluster": cluster})
    return BY_NAME["idle_power"].compute(con)


def idle_power_variables(rows: pl.DataFrame) -> dict[str, Scalar]:
    """{MODELS, WATTS} of the GPU models with an idle power in `rows` (`idle_power`'s; none: {},
    and the SQL reads null: no power arm)."""
    rows = rows.filter(rows["idle_power_w"].is_not_null())  # one row per model, no '(all)' row
    if not rows.height:
        return {}
    return {
        MODELS: [str(m) for m in rows["gpu_model"].to_list()],
        WATTS: [float(w) for w in rows["idle_power_w"].to_list()],
    }
