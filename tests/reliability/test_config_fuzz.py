"""Configuration fuzzing: any value at any key is accepted or refused with one sentence naming it."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gpuwaste.config import ClusterConfig, ConfigError, PrometheusSource, Thresholds, parse_settings
from tests.reliability.fuzzing import fuzz_settings

THRESHOLD_KEYS = sorted(Thresholds.model_fields)
CLUSTER_KEYS = sorted(k for k in ClusterConfig.model_fields if k != "name")
PROM_KEYS = sorted(PrometheusSource.model_fields)

values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**12), max_value=10**12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.lists(
        st.one_of(st.integers(-5, 5), st.floats(allow_nan=True), st.text(max_size=5)), max_size=4
    ),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)


@st.composite
def documents(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    """A config document with one random value planted at a random key; returns (doc, key path)."""
    where = draw(st.sampled_from(["top", "thresholds", "cluster", "prometheus", "unknown"]))
    value = draw(values)
    base_cluster: dict[str, Any] = {"name": "c1"}
    if where == "top":
        key = draw(st.sampled_from(["data_dir", "clusters", "thresholds"]))
        return {key: value}, key
    if where == "thresholds":
        key = draw(st.sampled_from(THRESHOLD_KEYS))
        return {"thresholds": {key: value}}, f"thresholds.{key}"
    if where == "cluster":
        key = draw(st.sampled_from([*CLUSTER_KEYS, "name"]))
        return {"clusters": [{**base_cluster, key: value}]}, f"clusters.0.{key}"
    if where == "prometheus":
        key = draw(st.sampled_from(PROM_KEYS))
        prom = {"url": "http://127.0.0.1:9090", key: value}
        return {"clusters": [{**base_cluster, "prometheus": prom}]}, f"clusters.0.prometheus.{key}"
    key = draw(st.text(alphabet="abcdefghij_", min_size=1, max_size=8))
    return {"thresholds": {f"zz_{key}": value}}, f"thresholds.zz_{key}"


def _finite(v: Any) -> bool:
    return not (isinstance(v, float) and (math.isnan(v) or math.isinf(v)))


@fuzz_settings
@given(documents())
def test_any_value_is_accepted_or_named(case: tuple[dict[str, Any], str]) -> None:
    doc, key = case
    try:
        settings = parse_settings(doc, "fuzz.toml")
    except ConfigError as exc:
        msg = str(exc)
        assert msg.startswith("fuzz.toml: ")
        assert "\n" not in msg
        assert f"'{key}" in msg, (key, msg)  # names the key (or a key below it)
        return
    # Accepted: then every threshold must be a usable finite number.
    for name in THRESHOLD_KEYS:
        v = getattr(settings.thresholds, name)
        assert all(_finite(x) for x in v) if isinstance(v, list) else _finite(v), (name, v)
