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


MISFIT = "get busy and idle where the jobs start and end"


def test_a_wrong_timezone_is_named_when_the_gpus_work_hours_off_jobs_without_labels(
    tmp_path: Path,
) -> None:
    """A generated cluster whose samples carry no job id (DCGM's default): its allocations are
    tied by whole hosts and scontrol captures whatever the zone, so none stays unresolved, and
    a wrong --timezone measured every job hours off its work without a word (#46 item 3). The
    jobs' GPUs get busy and idle whole hours off the recorded starts and ends: the ingest line
    and analyze name the offset and --timezone. Read in UTC: no such line."""
    from gpuwaste.generate.cli import generate_command

    gen = tmp_path / "gen"
    generate_command(gen, seed=1, gpus=16, days=1, interval_s=60, no_job_labels=True)
    slurm = ("ingest", "slurm", "--file", str(gen / "sacct.txt"), "--scontrol",
             str(gen / "scontrol"), "--cluster", "g")  # fmt: skip
    data_dir = tmp_path / "wh"
    gpuwaste(data_dir, "ingest", "openmetrics", "--file", str(gen / "metrics.om"),
             "--cluster", "g", "--quiet")  # fmt: skip
    right = gpuwaste(data_dir, *slurm, "--timezone", "UTC").stdout
    assert "whole-host" in right and "scontrol" in right, right  # the ties this is about
    assert MISFIT not in right and "--timezone" not in right, right
    for zone, hours, side in (("America/Sao_Paulo", 3, "before"), ("Europe/Berlin", 1, "after")):
        line = gpuwaste(data_dir, *slurm, "--timezone", zone).stdout
        assert f"{MISFIT} {hours} h {side} their recorded times" in line, line
        assert "re-ingest the jobs with the right --timezone (the cluster's `timezone` key" in line
        assert SHIFTED not in line  # no allocation is left unresolved: the other hint is silent
    assert MISFIT in gpuwaste(data_dir, "analyze", "--quiet").stderr  # analyze says it too


def test_edge_fit_by_hand(tmp_path: Path) -> None:
    """One GPU busy (100) from 10:00 to 11:00, idle (0) around it, a sample a minute from 08:00
    to 11:59; its job recorded 09:00-10:00, tied by scontrol. An edge counts where both of its
    5-minute sides have samples. +1 h: the start (10:00) rises, the end (11:00) falls: net 1.
    0 h: the start (09:00) does not step, the end (10:00) rises where it should fall: net -0.5.
    -1 h: only the end (09:00) has both sides, and does not step: 0. +2 h: only the start
    (11:00) has both sides, and falls: -1. No other offset has an edge."""
    from datetime import UTC, datetime, timedelta

    import polars as pl

    from gpuwaste.warehouse.diagnose import edge_fit
    from gpuwaste.warehouse.schema import empty, table
    from gpuwaste.warehouse.store import Warehouse

    def rows(name: str, df: pl.DataFrame) -> pl.DataFrame:
        full = pl.concat([empty(table(name)), df], how="diagonal_relaxed")
        return full.select(list(table(name).columns))

    t0 = datetime(2026, 11, 1, 8, tzinfo=UTC)
    ts = [t0 + timedelta(minutes=m) for m in range(4 * 60)]
    util = [100.0 if 120 <= m < 180 else 0.0 for m in range(4 * 60)]
    wh = Warehouse(tmp_path)
    samples = pl.DataFrame({"cluster": "c", "host": "h1", "gpu": 0, "ts": ts, "util": util})
    wh.replace_window("gpu_samples", "c", t0, t0 + timedelta(hours=4), rows("gpu_samples", samples))
    alloc = {"cluster": "c", "job_id": "1", "attempt": 1, "host": "h1", "gpu": 0,
             "start_ts": t0 + timedelta(hours=1), "end_ts": t0 + timedelta(hours=2),
             "gpu_from": "scontrol"}  # fmt: skip
    wh.upsert("job_gpus", "c", "slurm", rows("job_gpus", pl.DataFrame([alloc])))
    fit = {h: (n, net) for h, n, net in edge_fit(wh, "c")}
    assert fit == {-1: (1, 0.0), 0: (2, -0.5), 1: (2, 1.0), 2: (1, -1.0)}
