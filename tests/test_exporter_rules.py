"""deploy/prometheus: the alerting and recording rules pass `promtool check rules` and their unit
tests (`promtool test rules`, series in, expected alerts out), the unit tests catch a changed
threshold, the example scrape config passes `promtool check config`, and every metric the rules
read is one the exporter serves."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from harness.components import require

from gpuwaste.exporter.metrics import METRICS

pytestmark = pytest.mark.prometheus

DEPLOY = Path(__file__).resolve().parent.parent / "deploy" / "prometheus"
RULES = DEPLOY / "gpuwaste-rules.yml"
RULE_TESTS = DEPLOY / "gpuwaste-rules.test.yml"
SCRAPE_CONFIG = DEPLOY / "scrape-config.yml"


def promtool(*args: str, cwd: Path = DEPLOY) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [require("promtool"), *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_promtool_check_rules() -> None:
    done = promtool("check", "rules", RULES.name)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 9 rules found" in done.stdout


def test_promtool_test_rules() -> None:
    done = promtool("test", "rules", RULE_TESTS.name)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


@pytest.mark.parametrize(
    ("change", "to"),
    [
        ("gpuwaste_idle_job_idle_seconds{job_id!=\"(other)\"} >= 2 * 3600", "gpuwaste_idle_job_idle_seconds >= 2 * 3600"),
        (">= 2 * 3600", ">= 3 * 3600"),
        ("> 0.5", "> 0.7"),
        ("10 * 3600", "1 * 3600"),
        ('kind=~"idle_slot|never_used"', 'kind=~"idle_slot"'),
        ('energy_joules_total{kind="lost"}', 'energy_joules_total{kind="used"}'),
        ('energy_joules_total{kind="used"}[1h])) > 0)', 'energy_joules_total{kind="used"}[1h])) >= 0)'),
        ("(3 * gpuwaste_update_interval_seconds)", "(4 * gpuwaste_update_interval_seconds)"),
    ],
)  # fmt: skip
def test_the_rule_tests_catch_a_changed_rule(tmp_path: Path, change: str, to: str) -> None:
    text = RULES.read_text()
    assert change in text
    (tmp_path / RULES.name).write_text(text.replace(change, to))
    shutil.copy(RULE_TESTS, tmp_path / RULE_TESTS.name)
    done = promtool("test", "rules", RULE_TESTS.name, cwd=tmp_path)
    assert done.returncode != 0
    assert "FAILED" in done.stdout + done.stderr


def test_promtool_check_config_of_the_scrape_example() -> None:
    done = promtool("check", "config", SCRAPE_CONFIG.name)
    assert done.returncode == 0, done.stdout + done.stderr
    config = yaml.safe_load(SCRAPE_CONFIG.read_text())
    (job,) = config["scrape_configs"]
    assert job["static_configs"][0]["targets"] == ["gpuwaste-host:9815"]


def rule_metric_names() -> set[str]:
    """The gpuwaste_* names the rules' expressions read (recorded series excluded)."""
    rules = yaml.safe_load(RULES.read_text())
    exprs = [r["expr"] for g in rules["groups"] for r in g["rules"]]
    names = {n for e in exprs for n in re.findall(r"(?<![:\w])gpuwaste_\w+", e)}
    return {n.removesuffix("_total") for n in names}  # a counter's family name


def test_the_rules_read_only_metrics_the_exporter_serves() -> None:
    names = rule_metric_names()
    assert "gpuwaste_idle_job_idle_seconds" in names and "gpuwaste_up" in names
    assert names <= set(METRICS)
