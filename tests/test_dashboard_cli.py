"""`gpuwaste dashboard`: its command line, where it listens, and that stopping it stops streamlit."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from harness.components import free_port
from typer.testing import CliRunner

from gpuwaste.cli import app
from gpuwaste.dashboard.cli import serve, streamlit_command
from gpuwaste.errors import UsageError

GPUWASTE = Path(sys.executable).with_name("gpuwaste")


def test_help_lists_the_options() -> None:
    out = CliRunner().invoke(app, ["dashboard", "--help"], terminal_width=200)
    assert out.exit_code == 0
    for opt in ("--data-dir", "--port", "--host", "127.0.0.1", "8501"):
        assert opt in out.output


def test_streamlit_command_is_headless_on_the_given_address() -> None:
    cmd = streamlit_command("127.0.0.1", 9999)
    pairs = dict(itertools.pairwise(cmd))
    assert pairs["--server.address"] == "127.0.0.1"
    assert pairs["--server.port"] == "9999"
    assert pairs["--server.headless"] == "true"
    assert pairs["--browser.gatherUsageStats"] == "false"
    assert cmd[-1] != "" and cmd[3] == "run" and cmd[4].endswith("app.py")


def test_a_bad_port_is_one_sentence(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="must be a TCP port"):
        serve(tmp_path, "127.0.0.1", 70000)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow
def test_listens_on_loopback_and_sigterm_stops_streamlit(tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("PORT", "GPUWASTE_DATA_DIR")}
    log = tmp_path / "log.txt"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(GPUWASTE), "dashboard", "--data-dir", str(tmp_path / "none"), "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=1):
                    break
            except OSError:
                assert proc.poll() is None, log.read_text()
                assert time.monotonic() < deadline, "dashboard did not start"
                time.sleep(0.2)
        listening = subprocess.run(
            ["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True, check=False
        ).stdout
        if listening:  # `ss` present: only the loopback address
            local = {line.split()[3] for line in listening.splitlines()}
            assert local == {f"127.0.0.1:{port}"}
        proc.send_signal(signal.SIGTERM)  # the gpuwaste process only, not its group
        assert proc.wait(timeout=20) == 0, log.read_text()
        deadline = time.monotonic() + 15
        while _group_alive(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _group_alive(proc.pid), "streamlit outlived gpuwaste dashboard"
    finally:
        if _group_alive(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)


def test_the_server_imports_the_pages_modules_first_quietly() -> None:
    """gpuwaste.dashboard.server preloads what the first page run needs, without printing
    Streamlit's "No runtime found" warnings to the operator's console."""
    code = (
        "import sys\n"
        "from gpuwaste.dashboard import server\n"
        "server.preload()\n"
        "missing = [m for m in ('polars', 'duckdb', 'pandas', 'pyarrow', "
        "'gpuwaste.dashboard.widgets', 'gpuwaste.dashboard.charts') if m not in sys.modules]\n"
        "print(missing)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
    assert "No runtime found" not in out.stderr, out.stderr
    assert streamlit_command("127.0.0.1", 1)[1:3] == ["-m", "gpuwaste.dashboard.server"]
