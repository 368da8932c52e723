"""Exactly once under a kill: a real `gpuwaste notify --send` process is SIGKILLed while the real
SMTP server holds the transaction, then run again.

- killed after the whole message reached the server (held before the server's answer to the
  end of DATA): the row is `unconfirmed`, the next run does not send it again (the server holds
  exactly one copy); `--resend-unconfirmed` sends it again with the same Message-ID;
- killed before the message was complete (held at RCPT): the row is `sending`, the server
  holds nothing, and the next run sends it: exactly one copy.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.smtp import smtp_server
from tests.test_notify import CONFIG, REPO, WINDOW, ledger, notify, wh  # noqa: F401 (fixture)

ANN = "ann@example.org"


def _start(data_dir: Path, url: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("GPUWASTE_CONFIG", None)
    return subprocess.Popen(
        [sys.executable, "-m", "gpuwaste", "notify", "--config",
         str(data_dir.parent / "gpuwaste.toml"), "--data-dir", str(data_dir), *WINDOW,
         "--send", "--smtp", url, "--sender", "gpuwaste@example.org"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip


def _kill(proc: subprocess.Popen[str]) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL


def _wait_for(predicate: object, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if callable(predicate) and predicate():
            return
        time.sleep(0.05)
    raise AssertionError("timed out")


@pytest.mark.slow
def test_killed_while_the_server_answers_is_not_sent_again(wh: Path) -> None:  # noqa: F811
    with smtp_server() as smtp:
        smtp.handler.hold_at = "data"
        proc = _start(wh, smtp.url)
        assert smtp.handler.arrived.wait(60), "the message never reached the server"
        rows = ledger(wh)
        assert rows["status"].to_list() == ["unconfirmed"]
        message_id = rows["message_id"][0]
        _kill(proc)
        smtp.handler.hold_at = None
        smtp.handler.release.set()  # the server accepts what it holds, to a dead client
        _wait_for(lambda: len(smtp.to(ANN)) == 1)
        args = ["--send", "--smtp", smtp.url, "--sender", "gpuwaste@example.org"]
        again = notify(wh, *args)
        assert again.returncode == 0, again.stderr
        assert f"email to {ANN}: unconfirmed since" in again.stderr
        assert message_id in again.stderr and "--resend-unconfirmed sends it" in again.stderr
        assert len(smtp.to(ANN)) == 1  # exactly one copy
        assert ledger(wh)["status"].to_list() == ["unconfirmed"]
        forced = notify(wh, *args, "--resend-unconfirmed")
        assert forced.returncode == 0, forced.stderr
        copies = smtp.to(ANN)
        assert len(copies) == 2 and {m["Message-ID"] for m in copies} == {message_id}
        assert ledger(wh)["status"].to_list() == ["sent"]


@pytest.mark.slow
def test_killed_before_the_message_was_complete_is_sent_by_the_next_run(wh: Path) -> None:  # noqa: F811
    with smtp_server() as smtp:
        smtp.handler.hold_at = "rcpt"
        proc = _start(wh, smtp.url)
        assert smtp.handler.arrived.wait(60), "the client never reached RCPT"
        assert ledger(wh)["status"].to_list() == ["sending"]
        message_id = ledger(wh)["message_id"][0]
        _kill(proc)
        smtp.handler.hold_at = None
        smtp.handler.release.set()
        time.sleep(0.5)
        assert smtp.handler.received == []
        again = notify(wh, "--send", "--smtp", smtp.url, "--sender", "gpuwaste@example.org")
        assert again.returncode == 0, again.stderr
        (msg,) = smtp.to(ANN)
        assert msg["Message-ID"] == message_id  # the id recorded before the kill
        rows = ledger(wh)
        assert rows["status"].to_list() == ["sent"] and rows["attempts"].to_list() == [2]
