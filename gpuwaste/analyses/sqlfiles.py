"""The SQL files under `gpuwaste/sql/`, and the variables they read with `getvariable(...)`.

Each file is one query an operator can read and run in `duckdb` after `set variable ...` for
the variables its header names; the analyses bind the same variables from the settings.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date, datetime
from functools import cache
from importlib import resources

import duckdb

from gpuwaste.config import Settings, Thresholds
from gpuwaste.warehouse.mig import MODEL_PROFILES, SLICE_WEIGHT_MACRO, smallest_profile
from gpuwaste.warehouse.reading import run

Scalar = str | int | float | bool | date | datetime | list[float] | list[str] | None


@cache
def load_sql(name: str) -> str:
    """Text of `gpuwaste/sql/<name>.sql`, e.g. `load_sql("analyses/waste_by_vc")`."""
    return resources.files("gpuwaste").joinpath(f"sql/{name}.sql").read_text(encoding="utf-8")


def _literal(value: Scalar) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return f"{float(value)!r}::double" if isinstance(value, float) else str(value)
    if isinstance(value, datetime):
        return f"timestamptz '{value.isoformat()}'"
    if isinstance(value, date):
        return f"date '{value.isoformat()}'"
    if isinstance(value, list) and all(isinstance(v, str) for v in value) and value:
        return "[" + ", ".join(_literal(v) for v in value) + "]::varchar[]"
    if isinstance(value, list):
        return "[" + ", ".join(repr(float(v)) for v in value) + "]::double[]"
    return "'" + str(value).replace("'", "''") + "'"


def set_variables(con: duckdb.DuckDBPyConnection, values: Mapping[str, Scalar]) -> None:
    """`set variable name = value` for each entry (values are typed literals, never spliced text
    from the data: names and values come from the settings)."""
    for name, value in values.items():
        run(con, f"set variable {name} = {_literal(value)}")


def define_macros(con: duckdb.DuckDBPyConnection) -> None:
    """The macros the SQL files call (each file's `-- macros:` header names those it calls):
    mig_slice_weight(profile), warehouse/mig.py's slice weight."""
    run(con, SLICE_WEIGHT_MACRO)


def threshold_variables(t: Thresholds) -> dict[str, Scalar]:
    """Every threshold as a SQL variable of the same name."""
    out: dict[str, Scalar] = {}
    for name, value in t.model_dump().items():
        out[name] = value
    return out


def device_variables(settings: Settings, cluster: str) -> dict[str, Scalar]:
    """What the per-GPU SQL knows of GPU models: the cluster's `gpu_models` map (host glob ->
    model; absent when the cluster has none, so the SQL reads NULL) for job_gpu_usage.sql, and
    each MIG-capable model's smallest profile (memory, share of the GPU) for job_usage.sql, and
    the `[cost]` prices (model glob -> price per GPU-hour; absent when none) for
    job_gpu_usage.sql, and the cluster's `[energy]` factors for energy_daily.sql."""
    fragments = list(MODEL_PROFILES)
    smallest = [smallest_profile(f) for f in fragments]
    out: dict[str, Scalar] = {
        "mig_model_fragments": fragments,
        "mig_smallest_mib": [p.memory_mib if p else 0.0 for p in smallest],
        "mig_smallest_weight": [p.weight if p else 0.0 for p in smallest],
    }
    if settings.cost.gpu_hour:
        out["cost_patterns"] = list(settings.cost.gpu_hour)
        out["cost_prices"] = [float(p) for p in settings.cost.gpu_hour.values()]
    energy = settings.energy.factors(cluster)  # energy_daily.sql; null: not configured
    out["energy_pue"] = energy.pue
    out["energy_co2_g_per_kwh"] = energy.co2_g_per_kwh
    out["energy_price_per_kwh"] = energy.price_per_kwh
    config = next((c for c in settings.clusters if c.name == cluster), None)
    if config is not None and config.vc_quotas:  # queue_causes.sql: fair-share judged
        out["vc_quota_names"] = list(config.vc_quotas)
        out["vc_quota_gpus"] = [float(g) for g in config.vc_quotas.values()]
    if config is not None and config.gpu_models:
        out["gpu_model_patterns"] = list(config.gpu_models)
        out["gpu_model_names"] = list(config.gpu_models.values())
    return out


def failure_variables(settings: Settings) -> dict[str, Scalar]:
    """What failure_attempts.sql reads of `[failures]`: the uids whose cancellations are an
    admin's."""
    return {"admin_uids": [str(uid) for uid in settings.failures.admin_uids]}
