"""What a new operator meets in the first hour, through the installed command: `--version`,
what `generate` wrote, one exit status (2) for a wrong command line across commands, a
connection error as one sentence, no empty warehouse left by a failed first ingest, and a
gzipped sacct file read as the plain one."""

from __future__ import annotations

import gzip
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpuwaste import __version__
from gpuwaste.generate.cli import generate_command
from tests.support.act_warehouse import two_jobs_warehouse

EXE = Path(sys.executable).parent / "gpuwaste"


def gpuwaste(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(EXE), *args], capture_output=True, text=True, timeout=120, cwd=cwd)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("gen")
    generate_command(out, seed=5, gpus=8, days=0.05)
    return out


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return two_jobs_warehouse(tmp_path_factory.mktemp("two") / "wh")


def test_version(tmp_path: Path) -> None:
    run = gpuwaste("--version", cwd=tmp_path)
    assert (run.returncode, run.stdout, run.stderr) == (0, f"gpuwaste {__version__}\n", "")


def test_generate_says_what_it_wrote(tmp_path: Path) -> None:
    out = tmp_path / "gen"
    run = gpuwaste("generate", "--out", str(out), "--gpus", "8", "--days", "0.05", "--seed", "2",
                   "--cluster", "lab", cwd=tmp_path)  # fmt: skip
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == (
        "gpuwaste generate: cluster 'lab', 8 GPUs, 0.05 day(s) from 2026-10-31 12:00 UTC, a "
        f"sample every 15 s (seed 2), written to {out}:"
    )
    listed = {line.split()[0].rstrip("/") for line in lines[1:]}
    assert listed == {p.name for p in out.iterdir()} == {
        "metrics.om", "sacct.txt", "philly", "truth.json"
    }  # fmt: skip
    philly = next(line for line in lines if line.startswith("  philly/"))
    assert f"{len(list((out / 'philly').iterdir()))} files" in philly
    assert all(line.endswith(("B", "KiB", "MiB")) for line in lines[1:])


def test_generate_refuses_an_earlier_runs_folder_and_lists_only_what_it_wrote(
    tmp_path: Path,
) -> None:
    """A second generate into the folder of one with --logs --no-job-labels is refused (exit 2,
    one sentence, the folder untouched): its logs/ and scontrol/ would mix with the new
    cluster. With --force they are removed first, and only what the run wrote is listed."""
    out = tmp_path / "gen"
    small = ["--out", str(out), "--gpus", "8", "--days", "0.05", "--seed", "2"]
    first = gpuwaste("generate", *small, "--logs", "--no-job-labels", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    earlier = sorted(p.name for p in out.iterdir())
    assert {"logs", "scontrol"} <= set(earlier)
    again = gpuwaste("generate", *small, cwd=tmp_path)
    names = ", ".join(n + "/" * (out / n).is_dir() for n in earlier)
    assert (again.returncode, again.stdout, again.stderr) == (
        2, "", f"gpuwaste: --out {out} already holds an earlier run's output ({names}): give a "
        "new or empty folder, or --force to remove those first.\n",
    )  # fmt: skip
    assert sorted(p.name for p in out.iterdir()) == earlier
    forced = gpuwaste("generate", *small, "--force", cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    listed = {line.split()[0].rstrip("/") for line in forced.stdout.splitlines()[1:]}
    assert listed == {p.name for p in out.iterdir()} == {
        "metrics.om", "sacct.txt", "philly", "truth.json"
    }  # fmt: skip
    (out / "notes.txt").write_text("mine")
    mine = gpuwaste("generate", *small, "--force", cwd=tmp_path)
    assert mine.returncode == 2 and "does not write" in mine.stderr
    assert (out / "notes.txt").read_text() == "mine" and (out / "truth.json").exists()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["report", "--format", "jsn"], "Invalid value for '--format'"),
        (["sql", "--format", "jsn", "select 1"], "Invalid value for '--format'"),
        (["report", "--by", "team"], "gpuwaste: --by 'team' is not one of: user, vc, model."),
        (["report", "--since", "soon"], "gpuwaste: --since 'soon' is not a period"),
        (["report", "nosuch"], "gpuwaste: no report named 'nosuch'"),
        (["analyze", "--since", "x"], "gpuwaste: --since 'x' is not a date"),
        (["policy", "replay", "--idle-hours", "0"], "gpuwaste: --idle-hours '0' is not accepted"),
        (["notify", "--since", "soon"], "gpuwaste: --since 'soon' is not a period"),
        (["generate", "--out", "g", "--gpus", "0"], "gpuwaste: --gpus 0 is not accepted"),
        (
            ["ingest", "slurm", "--file", "s.txt", "--cluster", "c", "--timezone", "Mars/X"],
            "gpuwaste: --timezone 'Mars/X' is not accepted",
        ),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else None,
)
def test_a_wrong_command_line_exits_2_in_every_command(
    two: Path, tmp_path: Path, args: list[str], says: str
) -> None:
    where = ["--data-dir", str(two)]
    argv = {"generate": args, "ingest": [args[0], *where, *args[1:]]}.get(args[0], args + where)
    run = gpuwaste(*argv, cwd=tmp_path)
    assert run.returncode == 2, (run.stdout, run.stderr)
    assert says in run.stderr and "Traceback" not in run.stderr
    assert run.stdout == ""


def test_an_unknown_cluster_is_listed_by_job_as_by_report(two: Path, tmp_path: Path) -> None:
    job = gpuwaste("job", "a", "--cluster", "typo", "--data-dir", str(two), cwd=tmp_path)
    assert job.returncode == 1
    assert job.stderr == f"gpuwaste: no analyzed jobs for cluster 'typo' in {two} (clusters: c).\n"
    report = gpuwaste("report", "--cluster", "typo", "--data-dir", str(two), cwd=tmp_path)
    assert report.returncode == 1 and "(clusters: c)" in report.stderr


def test_a_failed_first_ingest_leaves_no_warehouse_and_says_why_in_a_sentence(
    tmp_path: Path,
) -> None:
    # the configured form (every source of the config), with no retries: a refused connection
    data_dir = tmp_path / "new" / "wh"
    config = tmp_path / "gpuwaste.toml"
    config.write_text(
        f'data_dir = "{data_dir}"\n[[clusters]]\nname = "x"\n[clusters.prometheus]\n'
        'url = "http://127.0.0.1:9"\nretries = 0\n'
    )
    run = gpuwaste("ingest", "--config", str(config), "--quiet", cwd=tmp_path)
    assert run.returncode == 1
    assert run.stderr.splitlines()[0] == (
        "gpuwaste: x/prometheus: Prometheus at http://127.0.0.1:9 is unreachable: cannot "
        "connect: connection refused (after 1 attempt(s))."
    )
    assert not (tmp_path / "new").exists()  # every folder this run made is gone
    # the one-off form, a host name that does not resolve: no repr of an exception
    data_dir.parent.mkdir()
    (data_dir.parent / "keep.txt").write_text("mine")
    run = gpuwaste("ingest", "--data-dir", str(data_dir), "prometheus", "--url",
                   "http://nosuchhost.invalid:9090", "--cluster", "x", "--quiet", cwd=tmp_path)  # fmt: skip
    assert run.returncode == 1
    assert run.stderr.startswith(
        "gpuwaste: Prometheus at http://nosuchhost.invalid:9090 is unreachable: cannot connect: "
        "the host name does not resolve ("
    ), run.stderr
    assert "Error(" not in run.stderr and len(run.stderr.splitlines()) == 1
    assert not data_dir.exists() and (data_dir.parent / "keep.txt").read_text() == "mine"


def test_a_failed_ingest_keeps_a_warehouse_that_existed(inputs: Path, tmp_path: Path) -> None:
    data_dir = tmp_path / "wh"
    ok = gpuwaste("ingest", "--data-dir", str(data_dir), "slurm", "--file",
                  str(inputs / "sacct.txt"), "--cluster", "c", "--quiet", cwd=tmp_path)  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    before = sorted(p.relative_to(data_dir) for p in (data_dir / "parquet").rglob("*.parquet"))
    bad = gpuwaste("ingest", "--data-dir", str(data_dir), "slurm", "--file",
                   str(tmp_path / "missing.txt"), "--cluster", "c", cwd=tmp_path)  # fmt: skip
    assert bad.returncode == 1
    after = sorted(p.relative_to(data_dir) for p in (data_dir / "parquet").rglob("*.parquet"))
    assert after == before and before


def test_a_gzipped_sacct_file_is_read_as_the_plain_one(inputs: Path, tmp_path: Path) -> None:
    packed = tmp_path / "sacct.txt.gz"
    with (inputs / "sacct.txt").open("rb") as src, gzip.open(packed, "wb") as dst:
        shutil.copyfileobj(src, dst)
    lines = {}
    for name, path in (("plain", inputs / "sacct.txt"), ("gz", packed)):
        run = gpuwaste("ingest", "--data-dir", str(tmp_path / name), "slurm", "--file", str(path),
                       "--cluster", "c", cwd=tmp_path)  # fmt: skip
        assert run.returncode == 0, run.stderr
        lines[name] = run.stdout
    assert lines["gz"] == lines["plain"] and "records accepted, 0 quarantined" in lines["gz"]
