"""When a cluster's jobs can give no GPU time, the ingest summary line and `analyze` say why.

Through the real command line (typer's runner on `gpuwaste.cli.app`) on real warehouses: CSV
jobs without an allocation mapping, Slurm jobs whose GPU indices nothing can resolve, CPU-only
jobs; and no such line where the jobs do hold GPUs.
"""

from __future__ import annotations

from pathlib import Path

from click.testing import Result
from typer.testing import CliRunner

from gpuwaste.cli import app

TABULAR = Path(__file__).parent / "data" / "tabular"
ZERO = "so the analyses find 0 GPU-seconds"


def gpuwaste(data_dir: Path, *args: str) -> Result:
    res = CliRunner().invoke(app, [*args, "--data-dir", str(data_dir)])
    assert res.exit_code == 0, (res.output, res.exception)
    return res


def csv_jobs(data_dir: Path, mapping: Path) -> Result:
    return gpuwaste(
        data_dir, "ingest", "csv", "--jobs", str(TABULAR / "jobs.csv"),
        "--mapping", str(mapping), "--cluster", "t",
    )  # fmt: skip


def test_csv_jobs_without_an_allocation_mapping_say_why(data_dir: Path, tmp_path: Path) -> None:
    text = (TABULAR / "mapping.toml").read_text()
    assert 'allocation = "alloc"\n' in text
    mapping = tmp_path / "mapping.toml"
    mapping.write_text(text.replace('allocation = "alloc"\n', ""))
    line = csv_jobs(data_dir, mapping).stdout.strip()
    assert line.startswith("t/csv: ") and "0 job_gpus rows written" in line, line
    assert f"cluster 't': its 3 jobs hold no GPU allocation (no job_gpus rows), {ZERO}" in line
    assert "maps no `allocation` (per-host GPU indices) or `hosts` column" in line, line
    res = gpuwaste(data_dir, "analyze")
    assert "gpuwaste: cluster 't': its 3 jobs hold no GPU allocation" in res.stderr, res.stderr


def test_jobs_that_hold_gpus_get_no_such_line(data_dir: Path) -> None:
    assert ZERO not in csv_jobs(data_dir, TABULAR / "mapping.toml").output
    assert ZERO not in gpuwaste(data_dir, "analyze").output


def test_slurm_allocations_nothing_can_resolve_and_cpu_only_jobs(
    data_dir: Path, tmp_path: Path
) -> None:
    sacct = tmp_path / "sacct.txt"
    times = "2026-11-01T10:00:00|2026-11-01T11:00:00"
    sacct.write_text(
        "JobID|State|Start|End|AllocTRES|NodeList\n"
        f"1|COMPLETED|{times}|cpu=4,gres/gpu=2|gpu[01-02]\n"
        f"2|COMPLETED|{times}|cpu=4,gres/gpu=1|gpu03\n"
    )
    line = gpuwaste(data_dir, "ingest", "slurm", "--file", str(sacct), "--cluster", "s").stdout
    expected = (
        "cluster 's': the GPU index of all 3 job x host allocations is unknown (gpu = -1) and "
        f"no GPU sample is ingested yet to resolve them, {ZERO}"
    )
    assert expected in line, line
    assert expected in gpuwaste(data_dir, "analyze").stderr
    cpu = tmp_path / "sacct_cpu.txt"
    cpu.write_text(f"JobID|State|Start|End|AllocTRES|NodeList\n3|COMPLETED|{times}|cpu=4|c01\n")
    line = gpuwaste(data_dir, "ingest", "slurm", "--file", str(cpu), "--cluster", "c").stdout
    assert f"cluster 'c': none of its 1 jobs holds a GPU (gpus = 0: CPU-only jobs), {ZERO}" in line


SHIFTED = "met no GPU sample of their job"


def test_a_wrong_timezone_is_named_when_the_jobs_meet_their_samples_hours_off(
    tmp_path: Path,
) -> None:
    """A generated cluster (sacct times in UTC, samples labelled with the job id) read with a
    wrong --timezone: the short jobs meet none of their samples; the ingest line and analyze say
    the times look shifted by whole hours and name --timezone. Read in UTC: no such line."""
    from gpuwaste.generate.cli import generate_command

    gen = tmp_path / "gen"
    generate_command(gen, seed=7, gpus=16, days=1, interval_s=60)
    sacct = str(gen / "sacct.txt")
    data_dir = tmp_path / "wh"
    gpuwaste(data_dir, "ingest", "openmetrics", "--file", str(gen / "metrics.om"),
             "--cluster", "g", "--quiet")  # fmt: skip
    # Berlin: UTC+1 in November; Sao Paulo: UTC-3, no summer time since 2019
    for zone, hours, side in (("Europe/Berlin", 1, "after"), ("America/Sao_Paulo", 3, "before")):
        line = gpuwaste(data_dir, "ingest", "slurm", "--file", sacct, "--cluster", "g",
                        "--timezone", zone).stdout  # fmt: skip
        assert SHIFTED in line, line
        assert f"begin whole hours off its recorded start (most often {hours} h {side})" in line
        assert "re-ingest the jobs with the right --timezone (the cluster's `timezone` key" in line
    assert SHIFTED in gpuwaste(data_dir, "analyze", "--quiet").stderr  # analyze says it too
    right = gpuwaste(data_dir, "ingest", "slurm", "--file", sacct, "--cluster", "g",
                     "--timezone", "UTC").stdout  # fmt: skip
    assert SHIFTED not in right and "GPU index unknown" not in right, right
