"""deploy/slurm's prolog/epilog pair, run by a real POSIX sh (dash where installed) with the
environment Slurm gives a prolog, against temporary directories.

The formats they write are the readers' (docs/operator-guide.md#slurm-prolog-and-epilog):
dcgm-exporter's --hpc-job-mapping-dir (a file per GPU number holding job ids, one per line:
NVIDIA/dcgm-exporter internal/pkg/transformation/hpc.go) and Jobstats' /run/gpustat ("JOBID UID"
per GPU number and UUID: PrincetonUniversity/jobstats slurm/prolog.d/gpustats_helper.sh).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

DEPLOY = Path(__file__).resolve().parent.parent / "deploy" / "slurm"
SH = shutil.which("dash") or "/bin/sh"


@pytest.fixture
def dirs(tmp_path: Path) -> dict[str, Path]:
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    # stands in for `nvidia-smi --query-gpu=uuid --format=noheader,csv -i N`
    smi.write_text('#!/bin/sh\n[ "$1" = "--query-gpu=uuid" ] || exit 2\necho "GPU-uuid-$4"\n')
    smi.chmod(0o755)
    return {"dcgm": tmp_path / "dcgm", "gpustat": tmp_path / "gpustat", "smi": smi}


def run(script: str, dirs: dict[str, Path], jobstats: bool = False, **env: str) -> None:
    base = {"PATH": "/usr/bin:/bin", "DCGM_HPC_JOB_MAPPING_DIR": str(dirs["dcgm"])}
    if jobstats:
        base |= {"JOBSTATS_GPUSTAT_DIR": str(dirs["gpustat"]), "NVIDIA_SMI": str(dirs["smi"])}
    proc = subprocess.run(
        [SH, str(DEPLOY / f"gpuwaste-{script}.sh")],
        env=base | env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr


def files(folder: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(folder.iterdir())} if folder.exists() else {}


def test_dcgm_mapping_files_follow_the_jobs_on_each_gpu(dirs: dict[str, Path]) -> None:
    a = {"SLURM_JOB_ID": "101", "SLURM_JOB_GPUS": "0,2", "CUDA_VISIBLE_DEVICES": "0,2"}
    run("prolog", dirs, **a)
    assert files(dirs["dcgm"]) == {"0": "101\n", "2": "101\n"}
    run("prolog", dirs, **a)  # a prolog run twice changes nothing
    assert files(dirs["dcgm"]) == {"0": "101\n", "2": "101\n"}
    # a second job shares GPU 2 (sharding): both ids, one per line, as dcgm-exporter reads them
    b = {"SLURM_JOB_ID": "102", "SLURM_JOB_GPUS": "2"}
    run("prolog", dirs, **b)
    assert files(dirs["dcgm"]) == {"0": "101\n", "2": "101\n102\n"}
    run("epilog", dirs, **a)
    assert files(dirs["dcgm"]) == {"2": "102\n"}
    run("epilog", dirs, **b)
    assert files(dirs["dcgm"]) == {}


def test_jobstats_gpustat_files_only_when_asked(dirs: dict[str, Path]) -> None:
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_UID": "5001", "CUDA_VISIBLE_DEVICES": "1,MIG-abc"}
    run("prolog", dirs, **env)
    assert not dirs["gpustat"].exists()
    assert files(dirs["dcgm"]) == {"1": "7\n"}  # a MIG UUID has no DCGM mapping file
    run("prolog", dirs, jobstats=True, **env)
    assert files(dirs["gpustat"]) == {
        "1": "7 5001\n",
        "GPU-uuid-1": "7 5001\n",
        "MIG-abc": "7 5001\n",
    }
    # the next job already owns GPU 1's file when this job's epilog runs late: it stays
    (dirs["gpustat"] / "1").write_text("8 5002\n")
    run("epilog", dirs, jobstats=True, **env)
    assert files(dirs["gpustat"]) == {"1": "8 5002\n"}
    assert files(dirs["dcgm"]) == {}


@pytest.mark.parametrize(
    "variable", ["SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL"]
)
def test_the_epilog_reads_the_gpus_as_the_prolog_does(dirs: dict[str, Path], variable: str) -> None:
    """The scripts are installed apart (prolog.d/, epilog.d/), so each reads the job's GPUs
    itself: from whichever variable names them, the epilog removes all the prolog wrote."""
    env = {"SLURM_JOB_ID": "9", "SLURM_JOB_UID": "5001", variable: "0,3,MIG-abc"}
    run("prolog", dirs, jobstats=True, **env)
    assert set(files(dirs["dcgm"])) == {"0", "3"}
    assert set(files(dirs["gpustat"])) == {"0", "3", "GPU-uuid-0", "GPU-uuid-3", "MIG-abc"}
    run("epilog", dirs, jobstats=True, **env)
    assert files(dirs["dcgm"]) == {} and files(dirs["gpustat"]) == {}


def test_a_job_without_gpus_or_id_writes_nothing(dirs: dict[str, Path]) -> None:
    run("prolog", dirs, SLURM_JOB_ID="5")
    run("prolog", dirs, SLURM_JOB_GPUS="0")
    run("epilog", dirs, SLURM_JOB_ID="5", SLURM_JOB_GPUS="0")
    assert files(dirs["dcgm"]) == {}
