"""Old data are said in the terminal, as the dashboard's pages about "now" say them: `report
--since` warns under its table, `notify` with its default window (ending today) warns in the dry
run and refuses `--send` (exit 1, nothing sent or recorded), past LATE_AFTER_UPDATES scheduled
updates ([exporter] update_interval_s). A logs folder's watermark (a file's mtime) is named as
such and never makes old telemetry look fresh (docs/analyses.md, docs/act.md)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpuwaste.analyses.freshness import freshness, freshness_lines, newest_data
from gpuwaste.cli import app
from gpuwaste.warehouse.bookkeeping import LOGS_SOURCE, set_watermark
from gpuwaste.warehouse.store import Warehouse
from tests.support.act_warehouse import two_jobs_warehouse
from tests.support.two_jobs import T0

REPO = Path(__file__).resolve().parent.parent
LATE = re.compile(
    r"warning: c: the newest data are \d+ days old \(up to 2026-11-01 10:20 UTC\), more than 3 "
    r"scheduled updates \(3 x 300 s, \[exporter\] update_interval_s\): "
)


@pytest.fixture(scope="module")
def old(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two jobs on 2026-11-01 (their newest sample 10:20 UTC), analyzed: weeks old today."""
    return two_jobs_warehouse(tmp_path_factory.mktemp("old") / "wh")


@pytest.fixture(scope="module")
def recent(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same two jobs an hour ago, with updates scheduled hourly (late after 3 h)."""
    root = tmp_path_factory.mktemp("recent")
    (root / "gpuwaste.toml").write_text("[exporter]\nupdate_interval_s = 3600\n")
    t0 = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(hours=1)
    return two_jobs_warehouse(root / "wh", t0=t0)


def _config(data_dir: Path) -> list[str]:
    config = data_dir.parent / "gpuwaste.toml"
    return ["--config", str(config)] if config.exists() else []


def gpuwaste(data_dir: Path, *args: str) -> Any:
    env = {"COLUMNS": "200", "NO_COLOR": "1", "GPUWASTE_CONFIG": ""}
    argv = [*args, *_config(data_dir), "--data-dir", str(data_dir)]
    return CliRunner().invoke(app, argv, env=env)


def notify(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`gpuwaste notify` as cron runs it (a process: its exit status and stderr as printed)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("GPUWASTE_CONFIG", None)
    argv = ["notify", *args, *_config(data_dir), "--data-dir", str(data_dir)]
    return subprocess.run(
        [sys.executable, "-m", "gpuwaste", *argv],
        capture_output=True, text=True, env=env, check=False, timeout=120,
    )  # fmt: skip


def test_report_since_warns_when_the_newest_data_are_late(old: Path, recent: Path) -> None:
    since = gpuwaste(old, "report", "--since", "7d")
    assert since.exit_code == 0, since.output
    assert "No rows in" in since.stdout
    (line,) = [x for x in since.stderr.splitlines() if x.startswith("warning: c: the newest")]
    assert LATE.match(line), line
    assert line.endswith(
        "a period up to now (`--since 7d`) counts nothing after them. Run `gpuwaste ingest` "
        "and `gpuwaste analyze`, or schedule them."
    )
    # all time speaks of no "now": the footer says how far the data reach, with no warning
    whole = gpuwaste(old, "report")
    assert whole.exit_code == 0 and "(samples up to 2026-11-01 10:20:00 UTC)" in whole.stderr
    assert "newest data" not in whole.stderr
    fresh = gpuwaste(recent, "report", "--since", "7d")
    assert fresh.exit_code == 0 and "newest data" not in fresh.stderr, fresh.stderr


def test_notify_says_the_data_are_old_and_send_refuses(old: Path, recent: Path) -> None:
    dry = notify(old)  # the default window: the 7 days before today
    assert dry.returncode == 0, dry.stderr
    lines = dry.stdout.splitlines()
    assert lines[0].startswith("Window: ") and LATE.match(lines[1]), lines[:2]
    assert lines[1].endswith(
        "the window's digests would count nothing after them. Run `gpuwaste ingest` and "
        "`gpuwaste analyze`, or schedule them. --send refuses until then."
    )
    sent = notify(old, "--send", "--webhook", "http://127.0.0.1:9/hook")
    assert sent.returncode == 1 and sent.stdout == ""
    assert sent.stderr.startswith("gpuwaste: nothing sent for the window "), sent.stderr
    assert "c: the newest data are " in sent.stderr and sent.stderr.count("\n") == 1
    assert not (old / "parquet" / "notifications").exists()
    # a window the user chose and the data cover is no sign of a stalled pipeline
    chosen = notify(old, "--since", "2026-11-01", "--until", "2026-11-02")
    assert chosen.returncode == 0 and "newest data" not in chosen.stdout
    fresh = notify(recent)
    assert fresh.returncode == 0 and "newest data" not in fresh.stdout, fresh.stdout


def test_a_logs_watermark_is_a_file_time_and_never_makes_old_data_fresh(tmp_path: Path) -> None:
    """A cluster known from sacct (data up to a month ago) whose logs folder was written today:
    the footer names the logs' time as a file's, and the data are judged a month old."""
    wh = Warehouse(tmp_path)
    now = datetime(2026, 11, 29, 14, 0, tzinfo=UTC)
    set_watermark(wh, "c", "slurm", T0)
    set_watermark(wh, "c", LOGS_SOURCE, now - timedelta(minutes=5))
    assert newest_data(freshness(tmp_path), "c") == T0
    lines = freshness_lines(tmp_path, now=now, update_interval_s=300.0)
    assert (
        "logs ingested " in lines[0] and "(newest file written 2026-11-29 13:55:00 UTC)" in lines[0]
    )
    assert "slurm ingested " in lines[0] and "(data up to 2026-11-01 10:00:00 UTC)" in lines[0]
    assert any(
        x.startswith("warning: c: the newest data are 28 days old (up to 2026-11-01 10:00 UTC)")
        for x in lines
    ), lines
