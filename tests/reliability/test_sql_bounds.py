"""Memory and time bounds of one read-only query: `gpuwaste sql` (a real process) and the
dashboard's SQL page (sqlbox).

Found here (issue #47): the read-only connection had no memory limit, so `string_agg` over
`range(300000000)` grew the dashboard to 5.5 GB within the page's 30 s; `gpuwaste sql` had no time
limit (8 GB in 21 s) and printed a traceback on Ctrl-C. Fixed in gpuwaste/warehouse/bounded.py.

Each bomb here is sized to stop well within the machine: the `gpuwaste sql` processes run under an
outer RLIMIT_DATA of SAFETY_BYTES, so that without the fix they fail with another message (or
answer) instead of exhausting the machine.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from gpuwaste.dashboard import sqlbox
from gpuwaste.warehouse import Warehouse, refresh_catalog

T0 = datetime(2026, 11, 1, tzinfo=UTC)
MIB = 2**20
BOUND_MIB = 512
# A gpuwaste process's own resident size before any query (imports, views) is about 150-250 MB.
MARGIN_MIB = 400
SAFETY_BYTES = 4 * 2**30
# DuckDB's buffer manager tracks this one (0.9 GB of text in one aggregate) ...
AGGREGATE_BOMB = "select length(string_agg(x::varchar, ',')) from range(100000000) t(x)"
# ... not these: strings built by a scalar function, 2048 rows of 100 MB per chunk
SCALAR_BOMB = "select length(repeat('x', 100000000 + x)) from range(10001) t(x)"
# CPU only, for hours
LONG_QUERY = "select sum(x * x % 7) from range(100000000000) t(x)"


@pytest.fixture
def wh(tmp_path: Path) -> Path:
    d = tmp_path / "warehouse"
    rows = pl.DataFrame({"host": ["h"], "gpu": [0], "ts": [T0], "util": [1.0]})
    Warehouse(d).replace_window("gpu_samples", "c1", T0, T0 + timedelta(minutes=1), rows)
    refresh_catalog(d)
    return d


def _safety_limit() -> None:
    resource.setrlimit(resource.RLIMIT_DATA, (SAFETY_BYTES, SAFETY_BYTES))


def start_sql(wh: Path, sql: str, *flags: str, out: Path) -> subprocess.Popen[bytes]:
    exe = Path(sys.executable).parent / "gpuwaste"
    return subprocess.Popen(
        [str(exe), "sql", "--data-dir", str(wh), *flags, sql],
        stdout=(out / "stdout").open("wb"),
        stderr=(out / "stderr").open("wb"),
        preexec_fn=_safety_limit,
    )


def finish(
    proc: subprocess.Popen[bytes], out: Path, timeout_s: float = 180
) -> tuple[int, int, str]:
    """Wait for the process: its exit status, its peak resident size (bytes) and its stderr."""
    deadline = time.monotonic() + timeout_s
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            pytest.fail(f"gpuwaste sql still ran after {timeout_s:g} s")
        time.sleep(0.05)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage.ru_maxrss * 1024, (out / "stderr").read_text()


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.parametrize("bomb", [AGGREGATE_BOMB, SCALAR_BOMB], ids=["aggregate", "scalar"])
def test_cli_memory_bomb_is_refused_within_the_bound(wh: Path, tmp_path: Path, bomb: str) -> None:
    proc = start_sql(wh, bomb, "--memory-mib", str(BOUND_MIB), out=tmp_path)
    code, peak, err = finish(proc, tmp_path)
    assert code == 1, err
    assert err == (
        f"gpuwaste: the query needed more than {BOUND_MIB} MiB of memory and was stopped; "
        "raise --memory-mib (or [sql] memory_mib in gpuwaste.toml) to allow more.\n"
    )
    assert peak < (BOUND_MIB + MARGIN_MIB) * MIB, f"peak {peak / MIB:.0f} MiB"


def test_cli_time_bound_stops_the_query(wh: Path, tmp_path: Path) -> None:
    proc = start_sql(wh, LONG_QUERY, "--timeout", "1.5", out=tmp_path)
    code, _peak, err = finish(proc, tmp_path, timeout_s=120)
    assert code == 1, err
    assert err == (
        "gpuwaste: the query ran longer than 1.5 s and was stopped; "
        "raise --timeout (or [sql] timeout_s in gpuwaste.toml) to allow more.\n"
    )


def test_cli_bounds_come_from_the_config(wh: Path, tmp_path: Path) -> None:
    config = tmp_path / "gpuwaste.toml"
    exe = Path(sys.executable).parent / "gpuwaste"
    for timeout, sql, said in [
        (2, LONG_QUERY, "longer than 2 s"),
        (120, AGGREGATE_BOMB, f"{BOUND_MIB} MiB"),
    ]:
        config.write_text(
            f'data_dir = "{wh}"\n\n[sql]\nmemory_mib = {BOUND_MIB}\ntimeout_s = {timeout}\n'
        )
        res = subprocess.run(
            [str(exe), "sql", "--config", str(config), sql],
            capture_output=True, text=True, timeout=180, preexec_fn=_safety_limit,
        )  # fmt: skip
        assert res.returncode == 1 and said in res.stderr, res.stderr


def test_ctrl_c_stops_the_query_with_one_line(wh: Path, tmp_path: Path) -> None:
    proc = start_sql(wh, LONG_QUERY, out=tmp_path)
    # the query runs once the process has used a few seconds of CPU (start-up takes about one)
    deadline = time.monotonic() + 120
    while cpu_seconds(proc.pid) < 3.0:
        assert proc.poll() is None, (tmp_path / "stderr").read_text()
        assert time.monotonic() < deadline, "the query did not start"
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    code, _peak, err = finish(proc, tmp_path, timeout_s=60)
    assert (code, err) == (130, "gpuwaste: query interrupted (Ctrl-C).\n")


def test_sql_page_memory_bomb_is_refused_and_the_dashboard_does_not_grow(wh: Path) -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    for bomb in (AGGREGATE_BOMB, SCALAR_BOMB):
        out = sqlbox.run(wh, bomb, memory_mib=BOUND_MIB)
        assert out.frame is None
        assert out.error == (
            f"The query needed more than {BOUND_MIB} MiB of memory and was stopped; "
            "raise [sql] memory_mib in gpuwaste.toml to allow more."
        )
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    assert grown < 100 * MIB, f"this process grew by {grown / MIB:.0f} MiB"


def test_sql_page_time_bound(wh: Path) -> None:
    t0 = time.monotonic()
    out = sqlbox.run(wh, LONG_QUERY, timeout_s=3)
    assert out.error == (
        "The query ran longer than 3 s and was stopped; "
        "raise [sql] page_timeout_s in gpuwaste.toml to allow more."
    )
    assert time.monotonic() - t0 < 60  # killed, not left running


def test_sql_page_still_answers_and_hides_settings(wh: Path) -> None:
    ok = sqlbox.run(wh, "select count(*) as n from gpu_samples")
    assert ok.error is None and ok.frame is not None and ok.frame["n"].to_list() == [1]
    hidden = sqlbox.run(wh, "select current_setting('temp_directory')")
    assert hidden.error is not None and "settings are hidden" in hidden.error
    assert str(wh.resolve()) not in hidden.error
