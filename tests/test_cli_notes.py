"""What a report cannot tell is said under its table, at every terminal width (#45 items 1 and
7): a queue table whose fair-share was not judged (no `[clusters.vc_quotas]`) and a failures
table of a cluster without job logs say so, whether or not the narrow terminal left out the
"Fair-share judged" column; a cluster with quotas and logs gets neither note, and CSV / JSON
stay the frame alone.

The site: one generated cluster with quotas and logs, read twice from its own sacct file: as
`judged` (its VC quotas configured, its logs ingested) and as `bare` (neither). The Philly
sample of the demo is checked too: the trace has neither.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuwaste.demo import PHILLY_CLUSTER
from gpuwaste.generate import GeneratorSpec, write_all
from tests.support.cli_width import invoke

WIDTHS = (80, 100, 120)
FAIR_SHARE = "Fair-share is not judged"
NO_LOGS = "No job logs"


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("notes")
    gen = root / "gen"
    write_all(GeneratorSpec(seed=5, gpus=16, days=0.5, cluster="g", vc_quotas=True), gen, logs=True)
    quotas = json.loads((gen / "truth.json").read_text())["queue"]["vc_quotas"]
    toml = root / "gpuwaste.toml"
    toml.write_text(
        f'data_dir = "{root / "wh"}"\n'
        f'[[clusters]]\nname = "judged"\n[clusters.slurm]\nfile = "{gen / "sacct.txt"}"\n'
        f'[clusters.logs]\ndir = "{gen / "logs"}"\n[clusters.vc_quotas]\n'
        + "".join(f'"{vc}" = {n}\n' for vc, n in quotas.items())
        + f'[[clusters]]\nname = "bare"\n[clusters.slurm]\nfile = "{gen / "sacct.txt"}"\n'
    )
    invoke("ingest", "--config", str(toml), "--quiet", width=160)
    invoke("analyze", "--config", str(toml), "--quiet", width=160)
    return toml


def shown(config: Path, *args: str, width: int) -> str:
    """The command's output, its lines joined: a note wraps at the terminal's width."""
    return " ".join(invoke(*args, "--config", str(config), width=width).stdout.split())


@pytest.mark.parametrize("width", WIDTHS)
def test_queue_causes_without_quotas_say_fair_share_was_not_judged(
    config: Path, width: int
) -> None:
    bare = shown(config, "report", "queue_cause_summary", "--cluster", "bare", width=width)
    assert f"{FAIR_SHARE} for every VC in cluster bare" in bare
    assert "`[clusters.vc_quotas]`" in bare and "not no fair-share delay" in bare
    judged = shown(config, "report", "queue_cause_summary", "--cluster", "judged", width=width)
    assert "fair-share" in judged and FAIR_SHARE not in judged
    both = shown(config, "report", "queue_cause_summary", width=width)
    assert f"{FAIR_SHARE} for every VC in cluster bare:" in both


def test_the_note_is_there_where_the_judged_column_is_left_out(config: Path) -> None:
    """The case the reviewer met: at 100 columns the table has no "Fair-share judged" column,
    its fair-share rows read 0."""
    text = shown(config, "report", "queue_cause_summary", "--cluster", "bare", width=100)
    left_out = text.split("Left out to fit 100 columns:")[1]
    assert "Fair-share judged" in left_out.split(FAIR_SHARE)[0]


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", ["failure_reasons", "failure_attempts"])
def test_failures_of_a_cluster_without_logs_say_so(config: Path, name: str, width: int) -> None:
    bare = shown(config, "report", name, "--cluster", "bare", width=width)
    assert f"{NO_LOGS} in cluster bare:" in bare and "`gpuwaste ingest logs" in bare
    judged = shown(config, "report", name, "--cluster", "judged", width=width)
    assert NO_LOGS not in judged
    both = shown(config, "report", name, width=width)
    assert f"{NO_LOGS} in cluster bare:" in both
    # tables that show no reason say nothing of logs
    assert NO_LOGS not in shown(config, "report", "failure_retries", "--cluster", "bare", width=80)


@pytest.mark.parametrize("fmt", ["csv", "json"])
def test_csv_and_json_are_the_frame_alone(config: Path, fmt: str) -> None:
    for name in ("queue_cause_summary", "failure_reasons"):
        out = invoke(
            "report", name, "--cluster", "bare", "--format", fmt, "--config", str(config), width=80
        ).stdout
        assert FAIR_SHARE not in out and NO_LOGS not in out
        if fmt == "json":
            assert json.loads(out)


@pytest.mark.parametrize("width", WIDTHS)
def test_the_philly_sample_says_it_has_no_quotas_and_no_logs(
    demo_warehouse: Path, width: int
) -> None:
    args = ("--data-dir", str(demo_warehouse), "--cluster", PHILLY_CLUSTER)
    queue = " ".join(invoke("report", "queue_cause_summary", *args, width=width).stdout.split())
    assert f"{FAIR_SHARE} for every VC in cluster {PHILLY_CLUSTER}" in queue
    failures = " ".join(invoke("report", "failure_reasons", *args, width=width).stdout.split())
    assert "no signature" in failures and f"{NO_LOGS} in cluster {PHILLY_CLUSTER}" in failures
