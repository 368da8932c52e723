"""The README's "what your site runs" table, row by row, as a new user would try it.

Each row's cluster is generated (`gpuwaste generate` with the row's `--telemetry`, and
`--no-job-labels` for DCGM without `hpc_job`; the Kubernetes row: the harness's DCGM series with
`pod` labels and kube-state-metrics), backfilled into one real Prometheus (each row's series
with a label of its own), and the README's commands are run through the shell with the row's
flags added exactly as the table shows them, in the generated folder (so `scontrol/` and
`sacct.txt` are its own): `gpuwaste ingest prometheus ... <column 2>`, `gpuwaste ingest slurm
--file sacct.txt ... <column 3>` (not for "no Slurm"), `gpuwaste analyze`. The test adds only the
Prometheus URL, the generated window and the row's label filter.

Every Slurm row must find the GPU time of the `hpc_job` row within the capture bound of
tests/test_dialects_e2e.py (a job between two captures can be missed), and the Kubernetes row
every pod it planted. The slurm-job-exporter row too: its job-local GPU indices are placed on
devices of each job's own (gpuwaste/ingest/job_local_gpus.py), never shared by two jobs.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from harness.prometheus import (
    Synthetic,
    running_prometheus,
    with_label,
    write_synthetic_openmetrics,
)

from gpuwaste.warehouse.store import Warehouse
from tests.test_dialects_e2e import LABEL, MISS_MAX
from tests.test_readme_examples import README, shell

pytestmark = [pytest.mark.slow, pytest.mark.prometheus]

GENERATE = "gpuwaste generate --seed 5 --gpus 16 --days 0.1 --out ."
CLUSTER = "prod"  # the README's cluster name


def table_rows() -> list[tuple[str, str, str]]:
    """(your site runs, add to ingest prometheus, add to ingest slurm), flags without quotes."""
    head = "| your site runs | add to `ingest prometheus` | add to `ingest slurm` |"
    lines = README.split(head, 1)[1].split("\n\n", 1)[0].splitlines()[2:]
    rows = []
    for line in lines:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        assert len(cells) == 3, line
        rows.append((cells[0], cells[1].strip("`"), cells[2].strip("`")))
    return rows


ROWS = table_rows()


def _generate_flags(row: tuple[str, str, str]) -> str:
    """How the generator writes the cluster a site of this row has."""
    site, prom, _ = row
    flags = " ".join(re.findall(r"--telemetry \S+", prom))
    if "without `hpc_job`" in site:
        flags += " --no-job-labels"
    return flags


def _kube(row: tuple[str, str, str]) -> bool:
    return row[2] == "no Slurm"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    base = tmp_path_factory.mktemp("rows")
    files = []
    for n, row in enumerate(ROWS):
        folder = base / f"row{n}"
        folder.mkdir()
        if _kube(row):
            spec = write_synthetic_openmetrics(
                Synthetic(job_label="pod", kube=True), folder / "metrics.om"
            )
            (folder / "planted.json").write_text(json.dumps(sorted(spec.planted_jobs)))
        else:
            done = shell(f"{GENERATE} {_generate_flags(row)}", folder)
            assert done.returncode == 0, done.stderr
        files.append(with_label(folder / "metrics.om", base / f"row{n}.om", LABEL, f"row{n}"))
    with running_prometheus(files, base / "prom") as prom:
        yield prom, base


def _run(row_no: int, server: Any) -> tuple[Path, list[str]]:
    prom, base = server
    folder = base / f"row{row_no}"
    site, prom_flags, slurm_flags = ROWS[row_no]
    if _kube(ROWS[row_no]):
        start, end = "2026-09-21T14:13:20Z", "2026-09-21T16:13:20Z"  # Synthetic's window
    else:
        window = json.loads((folder / "truth.json").read_text())["window"]
        start, end = window["start"], window["end"]
    commands = [
        f"gpuwaste ingest prometheus --url {prom.url} --cluster {CLUSTER} --since {start} "
        f"--until {end} --label-filter '{{{LABEL}=\"row{row_no}\"}}' {prom_flags}",
    ]
    if not _kube(ROWS[row_no]):
        commands.append(f"gpuwaste ingest slurm --file sacct.txt --cluster {CLUSTER} {slurm_flags}")
    commands.append("gpuwaste analyze")
    said = []
    for command in commands:
        done: subprocess.CompletedProcess[str] = shell(command, folder)
        assert done.returncode == 0, (site, command, done.stderr)
        said.append(done.stdout + done.stderr)
    return folder / "gpuwaste-data", said


def _gpu_s(data_dir: Path) -> float:
    return float(Warehouse(data_dir).read("job_usage", CLUSTER)["gpu_s"].sum())


def test_the_table_names_every_telemetry_a_site_may_run() -> None:
    flags = {m for _, prom, _ in ROWS for m in re.findall(r"--telemetry (\S+)", prom)}
    from gpuwaste.dialects import NAMES

    assert flags == set(NAMES) - {"dcgm"}
    assert any("hpc_job" in site for site, _, _ in ROWS)
    assert any(_kube(r) for r in ROWS)


ROW_PARAMS = [pytest.param(n, id=r[0][:30]) for n, r in enumerate(ROWS)]


@pytest.mark.parametrize("row_no", ROW_PARAMS)
def test_each_row_finds_the_gpu_time(row_no: int, server: Any) -> None:
    data_dir, said = _run(row_no, server)
    site = ROWS[row_no][0]
    if _kube(ROWS[row_no]):
        planted = set(json.loads((server[1] / f"row{row_no}" / "planted.json").read_text()))
        jobs = Warehouse(data_dir).read("job_usage", CLUSTER).filter(pl.col("gpu_s") > 0)
        assert {j.split("/")[-1] for j in jobs["job_id"]} == planted, said
        return
    ref_row = next(n for n, r in enumerate(ROWS) if "naming the job" in r[0])
    ref_dir = server[1] / f"row{ref_row}" / "gpuwaste-data"
    if not ref_dir.exists():
        _run(ref_row, server)
    got, ref = _gpu_s(data_dir), _gpu_s(ref_dir)
    assert ref > 0 and (1 - MISS_MAX) * ref <= got <= ref * (1 + 1e-9), (site, got, ref, said)
