"""Start-up of the `gpuwaste` command: `import gpuwaste.cli` declares every command's options and
help without importing what the commands run (the dashboard, the exporter, chat clients, Spark,
the ingest sources' parsers and HTTP clients), so that `gpuwaste job` answers within a second
(bench/act_job_notify.py). A command imports its heavy modules inside its function."""

from __future__ import annotations

import importlib
import json

from gpuwaste.ingest.sources import SOURCES, LazyRunner
from tests.support.interpreter import fresh_python

# Packages (and gpuwaste modules) that only the commands that use them may import.
NOT_AT_START = (
    "streamlit",
    "prometheus_client",
    "apprise",
    "pyspark",
    "requests",
    "pyarrow",
    "aiosmtpd",
    "gpuwaste.dashboard.queries",
    "gpuwaste.exporter.collector",
    "gpuwaste.act.job_report",
    "gpuwaste.act.notify",
    "gpuwaste.act.policy.replay",
    "gpuwaste.analyses.run",
    "gpuwaste.analyses.engines",
    "gpuwaste.generate.output",
    "gpuwaste.ingest.run",
    "rich",  # the terminal tables and progress display (typer imports it for --help only)
    "gpuwaste.ingest.prometheus.source",
    "gpuwaste.ingest.prometheus.client",
    "gpuwaste.ingest.prometheus.parse",
    "gpuwaste.ingest.prometheus.openmetrics_source",
    "gpuwaste.ingest.prometheus.openmetrics_parse",
    "gpuwaste.ingest.slurm.source",
    "gpuwaste.ingest.slurm.parse",
    "gpuwaste.ingest.philly.source",
    "gpuwaste.ingest.philly.parse",
    "gpuwaste.ingest.tabular.source",
    "gpuwaste.ingest.tabular.parse",
)


def modules_after(statement: str) -> set[str]:
    """The modules a fresh interpreter holds after running `statement`."""
    code = f"import json, sys; {statement}; print(json.dumps(sorted(sys.modules)))"
    return set(json.loads(fresh_python(code)))


def loaded(modules: set[str], name: str) -> bool:
    return name in modules or any(m.startswith(name + ".") for m in modules)


def test_importing_the_cli_loads_none_of_the_heavy_modules() -> None:
    modules = modules_after("import gpuwaste.cli")
    assert "gpuwaste.act.cli" in modules and "gpuwaste.ingest.cli" in modules
    assert [name for name in NOT_AT_START if loaded(modules, name)] == []


def test_the_check_sees_a_heavy_module_when_one_is_imported() -> None:
    modules = modules_after("import gpuwaste.cli, gpuwaste.ingest.prometheus.source")
    assert loaded(modules, "requests") and loaded(modules, "gpuwaste.ingest.prometheus.source")


def test_every_source_runner_names_a_function_of_its_module() -> None:
    for source in SOURCES:
        assert isinstance(source.run, LazyRunner), source.name
        run = getattr(importlib.import_module(source.run.module), source.run.name)
        assert callable(run) and run.__name__ == f"run_{source.name}", source
