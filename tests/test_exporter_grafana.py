"""deploy/grafana/gpuwaste.json: a valid Grafana dashboard (the fields of Grafana's dashboard
model that an import needs: panels with a datasource, targets and a gridPos on the 24-column
grid, templating with a `vc` query variable), whose every PromQL expression names only metrics
that a live exporter serves: the names are read from `/metrics` of `gpuwaste exporter` running
on loopback over a warehouse that has every kind of figure."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from gpuwaste.exporter.collector import WasteCollector
from tests.test_exporter import build, serving

DASHBOARD = Path(__file__).resolve().parent.parent / "deploy" / "grafana" / "gpuwaste.json"
PROMQL_WORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool",
    "offset", "inf", "nan",
}  # fmt: skip


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    data = json.loads(DASHBOARD.read_text())
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def live_metric_names(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    """The metric names `gpuwaste exporter` serves, read over HTTP from a running one."""
    data_dir = tmp_path_factory.mktemp("grafana") / "data"
    build(data_dir)
    with serving(WasteCollector(data_dir)) as url:
        text = requests.get(url, timeout=30).text
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers that are not functions,
    keywords, label names (inside {...} or a by/on/... list), durations or strings."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for m in re.finditer(r"(?<![\w.])([A-Za-z_:][\w:]*)(\s*\()?", text):
        if m.group(2) or m.group(1).lower() in PROMQL_WORDS:
            continue
        names.add(m.group(1))
    return names


def graph_panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for p in dashboard["panels"]:
        if p["type"] == "row":
            yield from p.get("panels", [])
        else:
            yield p


def test_metric_names_reads_promql() -> None:
    expr = (
        'sum by (cluster) (rate(foo_total{a="b{c}"}[5m])) / on (x) group_left () bar '
        "> 3 * time() - baz offset 5m"
    )
    assert metric_names(expr) == {"foo_total", "bar", "baz"}


def test_it_is_a_grafana_dashboard(dashboard: dict[str, Any]) -> None:
    for key in ("title", "uid", "panels", "templating", "schemaVersion", "time"):
        assert key in dashboard, key
    assert isinstance(dashboard["schemaVersion"], int)
    panels = list(graph_panels(dashboard))
    assert {p["type"] for p in panels} >= {"stat", "timeseries", "table"}
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    cells: set[tuple[int, int]] = set()
    for p in dashboard["panels"]:
        g = p["gridPos"]
        assert all(isinstance(g[k], int) for k in "hwxy"), p["title"]
        assert g["w"] > 0 and g["h"] > 0 and g["x"] >= 0 and g["x"] + g["w"] <= 24, p["title"]
        mine = {
            (x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])
        }
        assert not cells & mine, f"{p['title']} overlaps another panel"
        cells |= mine
    for p in panels:
        assert p["datasource"]["type"] == "prometheus", p["title"]
        assert p["targets"], p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]
        for t in p["targets"]:
            assert t["expr"].strip() and t["datasource"]["type"] == "prometheus"


def test_it_has_a_vc_variable_and_the_panels_the_issue_asks_for(dashboard: dict[str, Any]) -> None:
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    vc = variables["vc"]
    assert vc["type"] == "query" and vc["multi"] and vc["includeAll"]
    assert "label_values(" in vc["query"]["query"] and vc["query"]["query"].endswith(", vc)")
    assert variables["datasource"]["type"] == "datasource"
    panels = list(graph_panels(dashboard))
    exprs = {p["title"]: " ".join(t["expr"] for t in p["targets"]) for p in panels}
    # a waste trend, the money wasted, the top idle jobs table, pipeline health; the VC variable
    trend = [
        p
        for p in panels
        if p["type"] == "timeseries" and "gpuwaste_waste_ratio" in exprs[p["title"]]
    ]
    assert trend and "$vc" in exprs[trend[0]["title"]]
    table = [
        p
        for p in panels
        if p["type"] == "table" and "gpuwaste_idle_job_idle_seconds" in exprs[p["title"]]
    ]
    assert table and "$vc" in exprs[table[0]["title"]]
    money = [p for p in panels if "gpuwaste_wasted_money" in exprs[p["title"]]]
    assert money and "$vc" in exprs[money[0]["title"]]
    assert "currency" in money[0]["targets"][0]["legendFormat"]
    health = " ".join(exprs.values())
    for name in ("gpuwaste_last_ingest_timestamp_seconds", "gpuwaste_last_analyze_timestamp_seconds",
                 "gpuwaste_quarantined_records", "gpuwaste_warehouse_age_seconds"):  # fmt: skip
        assert name in health


def test_every_query_uses_only_metrics_the_live_exporter_serves(
    dashboard: dict[str, Any], live_metric_names: set[str]
) -> None:
    used: set[str] = set()
    for p in graph_panels(dashboard):
        for t in p["targets"]:
            names = metric_names(t["expr"])
            assert names <= live_metric_names, (p["title"], names - live_metric_names)
            used |= names
    for v in dashboard["templating"]["list"]:
        if v["type"] == "query":
            m = re.match(r"label_values\(([\w:]+)", v["query"]["query"])
            assert m and m.group(1) in live_metric_names, v["name"]
            used.add(m.group(1))
    assert len(used) >= 12  # the check saw the queries' names
    assert "gpuwaste_up" in live_metric_names and "gpuwaste_idle_job_gpus" in live_metric_names
