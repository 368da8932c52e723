"""deploy/grafana/gpuwaste.json: a valid Grafana dashboard (the fields of Grafana's dashboard
model that an import needs: panels with a datasource, targets and a gridPos on the 24-column
grid, templating with a `vc` query variable), whose every PromQL expression names only metrics
that a live exporter serves: the names are read from `/metrics` of `gpuwaste exporter` running
on loopback over a warehouse that has every kind of figure; that Prometheus parses (`promtool
check rules`); whose units are Grafana's own unit ids; and whose energy panels, evaluated by
Prometheus over counters of known rates (`promtool test rules`), give the hand-computed kWh."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from gpuwaste.exporter.collector import WasteCollector
from tests.test_exporter import build, serving
from tests.test_exporter_rules import promtool

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
def live_families(tmp_path_factory: pytest.TempPathFactory) -> list[Metric]:
    """The metric families `gpuwaste exporter` serves, read over HTTP from a running one."""
    data_dir = tmp_path_factory.mktemp("grafana") / "data"
    build(data_dir)
    with serving(WasteCollector(data_dir)) as url:
        text = requests.get(url, timeout=30).text
    return list(text_string_to_metric_families(text))


@pytest.fixture(scope="module")
def live_metric_names(live_families: list[Metric]) -> set[str]:
    return {s.name for f in live_families for s in f.samples}


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
    assert "gpuwaste_energy_joules_total" in used  # the energy panels were checked too


def test_the_variables_list_every_cluster_and_vc_the_exporter_serves(
    dashboard: dict[str, Any], live_families: list[Metric]
) -> None:
    """The pickers read gauges every analyzed cluster and VC has, not the counters: those hold
    only settled rows (docs/exporter.md#counters-and-windows), so a cluster or VC none of whose
    jobs has settled yet would vanish from the picker."""
    variables = {
        v["name"]: v["query"]["query"]
        for v in dashboard["templating"]["list"]
        if v["type"] == "query"
    }
    picked: dict[str, set[str]] = {}
    served: dict[str, set[str]] = {"cluster": set(), "vc": set()}
    for name in ("cluster", "vc"):
        m = re.match(r"label_values\(([\w:]+)(?:\{[^}]*\})?, (\w+)\)$", variables[name])
        assert m and m.group(2) == name, variables[name]
        family = next(f for f in live_families if f.name == m.group(1))
        assert family.type == "gauge", (name, family.name, family.type)
        picked[name] = {s.labels[name] for s in family.samples}
    for f in live_families:
        for s in f.samples:
            for label, seen in served.items():
                if s.labels.get(label) and not (
                    label == "vc" and f.name.startswith("gpuwaste_idle_job")
                ):
                    seen.add(s.labels[label])
    assert picked["cluster"] == served["cluster"] == {"c1", "c2"}
    assert picked["vc"] == served["vc"] and len(picked["vc"]) >= 2


# Grafana's unit ids (packages/grafana-data/src/valueFormats/categories.ts of grafana/grafana,
# commit 002fa1b09fd5c809ef370334a20e23ec520ac8e3; tests/fixtures/README.md): those a panel of
# this dashboard may use. An id Grafana does not know (e.g. "kWh") shows the bare number.
GRAFANA_UNITS = {"none", "percentunit", "s", "h", "dtdurations", "watt", "watth", "kwatth", "joule"}


def units(panel: dict[str, Any]) -> list[str]:
    field = panel.get("fieldConfig", {})
    found = [field.get("defaults", {}).get("unit")]
    for o in field.get("overrides", []):
        found += [p["value"] for p in o["properties"] if p["id"] == "unit"]
    return [u for u in found if u is not None]


def test_every_unit_is_one_grafana_knows(dashboard: dict[str, Any]) -> None:
    seen = [u for p in graph_panels(dashboard) for u in units(p)]
    assert {"kwatth", "percentunit", "s"} <= set(seen)
    assert set(seen) <= GRAFANA_UNITS


def target_unit(panel: dict[str, Any], target: dict[str, Any]) -> str | None:
    """The unit a target's values are shown in: the panel's, or in a table the override of the
    column the target's values are renamed to (`Value #<refId>`)."""
    default = panel.get("fieldConfig", {}).get("defaults", {}).get("unit")
    if panel["type"] != "table":
        return default
    renamed = {
        old: new
        for tr in panel.get("transformations", [])
        if tr["id"] == "organize"
        for old, new in tr["options"].get("renameByName", {}).items()
    }
    column = renamed.get(f"Value #{target['refId']}")
    for o in panel["fieldConfig"].get("overrides", []):
        if o["matcher"] == {"id": "byName", "options": column}:
            return next((p["value"] for p in o["properties"] if p["id"] == "unit"), default)
    return default


def test_energy_panels_show_kwh_allocated_and_lost_per_cluster_and_vc_and_the_share(
    dashboard: dict[str, Any],
) -> None:
    targets = [
        (p, t)
        for p in graph_panels(dashboard)
        for t in p["targets"]
        if "gpuwaste_energy_joules_total" in t["expr"]
    ]
    amounts, shares = [], []
    for p, t in targets:
        e = t["expr"]
        assert "increase(gpuwaste_energy_joules_total{" in e, p["title"]
        assert 'cluster=~"$cluster"' in e and 'vc=~"$vc"' in e, p["title"]
        # a share is lost / used in percent; an amount is joules / 3.6e6 in Grafana's kWh
        if "/ sum" in e or "/ (sum" in e:
            assert target_unit(p, t) == "percentunit", (p["title"], t["refId"])
            shares.append(e)
        else:
            assert target_unit(p, t) == "kwatth", (p["title"], t["refId"])
            assert e.endswith(" / 3.6e6"), (p["title"], t["refId"])
            amounts.append(e)
    for by in ("sum(", "sum by (cluster) (", "sum by (cluster, vc) ("):
        assert any(e.startswith(by) and 'kind="used"' in e for e in amounts), by
        assert any(e.startswith(by) and 'kind="lost"' in e for e in amounts), by
    for by in ("sum(", "sum by (cluster, vc) ("):
        assert any(e.startswith(by) for e in shares), by


def as_prometheus(expr: str) -> str:
    """A panel's expression as Prometheus receives it: Grafana's variables substituted (every
    cluster and VC; the time range 1 h)."""
    return expr.replace("$cluster", ".*").replace("$vc", ".*").replace("$__range", "1h")


@pytest.mark.prometheus
def test_every_query_parses_in_prometheus(dashboard: dict[str, Any], tmp_path: Path) -> None:
    exprs = [as_prometheus(t["expr"]) for p in graph_panels(dashboard) for t in p["targets"]]
    rules = {"groups": [{"name": "panels", "rules": [
        {"record": f"panel:expr{i}", "expr": e} for i, e in enumerate(exprs)
    ]}]}  # fmt: skip
    (tmp_path / "panels.yml").write_text(json.dumps(rules))
    done = promtool("check", "rules", "panels.yml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in done.stdout


@pytest.mark.prometheus
def test_the_energy_panels_give_the_hand_computed_kwh(
    dashboard: dict[str, Any], tmp_path: Path
) -> None:
    """Each energy query evaluated by Prometheus itself (`promtool test rules`) over counters
    that grow at a known rate: c1/a draws 1 kW (60 kJ a minute), 0.25 kW of it lost; c1/b
    0.5 kW, none lost; c2/a 2 kW, 1 kW lost. Over an hour, in kWh: 1, 0.25; 0.5, 0; 2, 1."""
    rates = {
        ("c1", "a"): (60_000, 15_000),
        ("c1", "b"): (30_000, 0),
        ("c2", "a"): (120_000, 60_000),
    }
    series = [
        {"series": f'gpuwaste_energy_joules_total{{cluster="{c}",kind="{k}",vc="{v}"}}',
         "values": f"0+{r}x120"}
        for (c, v), (used, lost) in rates.items() for k, r in (("used", used), ("lost", lost))
    ]  # fmt: skip
    c1, c2 = '{cluster="c1"}', '{cluster="c2"}'
    c1a, c1b, c2a = ('{cluster="c1", vc="a"}', '{cluster="c1", vc="b"}', '{cluster="c2", vc="a"}')
    want = {  # panel title -> per target, in order: {series labels: value}
        "Energy allocated, over the time range": [{"{}": 3.5}],
        "Energy lost, over the time range": [{"{}": 1.25}],
        "Share of the energy lost, over the time range": [{"{}": 1.25 / 3.5}],
        "Energy per cluster (kWh in the hour before each point)": [
            {c1: 1.5, c2: 2.0},
            {c1: 0.25, c2: 1.0},
        ],
        "Energy lost per VC (kWh in the hour before each point)": [{c1a: 0.25, c1b: 0, c2a: 1}],
        "Share of the energy lost per VC (over the 24 h before each point)": [
            {c1a: 0.25, c1b: 0, c2a: 0.5}
        ],
        "Energy per cluster and VC, over the time range": [
            {c1a: 1.0, c1b: 0.5, c2a: 2.0},
            {c1a: 0.25, c1b: 0, c2a: 1.0},
            {c1a: 0.25, c1b: 0, c2a: 0.5},
        ],
    }
    panels = {
        p["title"]: p
        for p in graph_panels(dashboard)
        if any("gpuwaste_energy_joules_total" in t["expr"] for t in p["targets"])
    }
    assert set(panels) == set(want)
    tests = [
        {
            "expr": as_prometheus(t["expr"]),
            "eval_time": "100m",
            "exp_samples": [{"labels": k, "value": v} for k, v in expected.items()],
        }
        for title, per_target in want.items()
        for t, expected in zip(panels[title]["targets"], per_target, strict=True)
    ]
    spec = {"rule_files": [], "evaluation_interval": "1m",
            "tests": [{"interval": "1m", "input_series": series, "promql_expr_test": tests}]}  # fmt: skip
    (tmp_path / "panels.test.yml").write_text(json.dumps(spec))
    done = promtool("test", "rules", "panels.test.yml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
