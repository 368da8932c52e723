"""A generated cluster with one MIG host and no scheduler: its jobs come from the `hpc_job`
labels of the instance series. Generated (`GeneratorSpec(mig_hosts=1)`), its OpenMetrics file
ingested with `gpuwaste ingest openmetrics --file`, then analyzed, through the command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from gpuwaste.cli import app
from gpuwaste.generate import GeneratorSpec, write_all

CLUSTER = "m"


def label_only_mig_cluster(base: Path) -> tuple[Path, list[dict[str, Any]]]:
    """(the analyzed warehouse under `base`, the planted MIG jobs of its truth.json: job_id,
    host, gpu, gpu_instance, mig_profile, ...)."""
    spec = GeneratorSpec(seed=2, gpus=8, days=0.1, interval_s=15, cluster=CLUSTER, mig_hosts=1)
    write_all(spec, base / "src")
    truth: list[dict[str, Any]] = json.loads((base / "src" / "truth.json").read_text())["mig"][
        "jobs"
    ]
    data = base / "wh"
    metrics = str(base / "src" / "metrics.om")
    for argv in (
        ["ingest", "openmetrics", "--file", metrics, "--cluster", CLUSTER],
        ["analyze"],
    ):
        res = CliRunner().invoke(app, [*argv, "--data-dir", str(data)])
        assert res.exit_code == 0, (argv, res.output)
    return data, truth
