"""docs/ingest-prometheus.md documents every flag of the two subcommands and every shipped
scheduling example, and the examples run the command they document."""

from __future__ import annotations

import typer.main

from gpuwaste.ingest.cli import ingest_app
from tests.conftest import REPO

DOC = REPO / "docs" / "ingest-prometheus.md"


def test_every_flag_is_documented() -> None:
    text = DOC.read_text()
    group = typer.main.get_group(ingest_app)
    for name in ("prometheus", "openmetrics"):
        command = group.commands[name]
        for param in command.params:
            for opt in param.opts:
                if opt.startswith("--") and opt != "--help":
                    assert f"`{opt}" in text or f"{opt} " in text, f"{name} {opt} is undocumented"


def test_scheduling_examples_are_shipped_and_shown() -> None:
    text = DOC.read_text()
    for path in (
        "deploy/systemd/gpuwaste-update.service",
        "deploy/systemd/gpuwaste-update.timer",
        "deploy/cron/gpuwaste-update.cron",
        "deploy/kubernetes/gpuwaste-update-cronjob.yaml",
    ):
        assert (REPO / path).is_file() and path in text
        body = (REPO / path).read_text()
        assert ("ingest" in body and "--quiet" in body) or path.endswith(".timer")
        assert "TOKEN=" not in body.replace("PROMETHEUS_TOKEN=...", "")  # no secret in files
    cron_line = [
        ln
        for ln in (REPO / "deploy/cron/gpuwaste-update.cron").read_text().splitlines()
        if ln[:1] == "*"
    ]
    assert len(cron_line) == 1 and cron_line[0] in text
