"""Credentials given in the environment never leave it: not in stdout/stderr, error messages,
`ingest_state`, `quarantine` or any other warehouse file, even when the request fails, and
even when the server echoes the request's headers into its error body.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import traceback
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest
from harness.components import free_port

from gpuwaste.config import PrometheusSource
from gpuwaste.ingest.base import IngestError
from gpuwaste.ingest.prometheus.client import PrometheusClient
from tests.reliability.echo_server import echo_server, url_of

TOKEN = "tok-Vx7q-SECRET-bearer"
USER = "svc-gpuwaste"
PASSWORD = "pw-Hk2m-SECRET-basic"
BASIC = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
SECRETS = (TOKEN, PASSWORD, BASIC)
ENV = {"GW_TEST_TOKEN": TOKEN, "GW_TEST_USER": USER, "GW_TEST_PASSWORD": PASSWORD}


def write_config(tmp_path: Path, url: str, auth: str) -> Path:
    creds = (
        'token_env = "GW_TEST_TOKEN"'
        if auth == "bearer"
        else 'username_env = "GW_TEST_USER"\npassword_env = "GW_TEST_PASSWORD"'
    )
    cfg = tmp_path / "gpuwaste.toml"
    cfg.write_text(
        f'data_dir = "{tmp_path / "warehouse"}"\n\n[[clusters]]\nname = "c1"\n\n'
        f'[clusters.prometheus]\nurl = "{url}"\n{creds}\nretries = 1\ntimeout_s = 2\n'
    )
    return cfg


def run_ingest(cfg: Path) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "gpuwaste"
    return subprocess.run(
        [
            str(exe),
            "ingest",
            "prometheus",
            "--config",
            str(cfg),
            "--cluster",
            "c1",
            "--since",
            "2026-11-01T00:00:00Z",
            "--until",
            "2026-11-01T01:00:00Z",
        ],
        env={**os.environ, **ENV},
        capture_output=True,
        text=True,
        timeout=120,
    )


def assert_no_secret(text: str, where: str) -> None:
    for s in SECRETS:
        assert s not in text, f"a credential appears in {where}: {text[:500]!r}"


def assert_warehouse_clean(data_dir: Path) -> None:
    """No credential in any file's bytes, nor in any string cell of any parquet table."""
    if not data_dir.exists():
        return
    for path in data_dir.rglob("*"):
        if not path.is_file():
            continue
        assert_no_secret(path.read_bytes().decode("latin-1"), str(path))
        if path.suffix == ".parquet":
            df = pl.read_parquet(path)
            cells = df.select(pl.col(pl.String)).rows() if df.height else []
            assert_no_secret(repr(cells), str(path))


@pytest.mark.parametrize("auth", ["bearer", "basic"])
@pytest.mark.parametrize(
    "mode", ["401", "403", "400-json", "422-json", "503", "500-json", "200-error"]
)
def test_failed_requests_never_show_the_credentials(tmp_path: Path, auth: str, mode: str) -> None:
    with echo_server(mode) as server:
        res = run_ingest(write_config(tmp_path, url_of(server), auth))
    assert server.seen, "the server was never asked"
    sent = " ".join(server.seen)
    assert (TOKEN in sent) if auth == "bearer" else (BASIC in sent)  # the secret was really sent
    assert res.returncode != 0
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("gpuwaste: ") and "Traceback" not in res.stderr, res.stderr
    assert_no_secret(res.stdout + res.stderr, "the command's output")
    assert_warehouse_clean(tmp_path / "warehouse")


@pytest.mark.parametrize("auth", ["bearer", "basic"])
def test_unreachable_server_message_has_no_credentials(tmp_path: Path, auth: str) -> None:
    res = run_ingest(write_config(tmp_path, f"http://127.0.0.1:{free_port()}", auth))
    assert res.returncode != 0 and "unreachable" in res.stderr, res.stderr
    assert_no_secret(res.stdout + res.stderr, "the command's output")
    assert_warehouse_clean(tmp_path / "warehouse")


@pytest.mark.parametrize("auth", ["bearer", "basic"])
def test_successful_run_keeps_credentials_out_of_ingest_state(tmp_path: Path, auth: str) -> None:
    with echo_server("200-empty") as server:
        res = run_ingest(write_config(tmp_path, url_of(server), auth))
    assert res.returncode == 0, res.stderr
    assert_no_secret(res.stdout + res.stderr, "the command's output")
    state = list((tmp_path / "warehouse").rglob("ingest_state/**/*.parquet"))
    assert state, "the run wrote no ingest_state"
    assert_warehouse_clean(tmp_path / "warehouse")


def test_exceptions_in_process_carry_no_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in ENV.items():
        monkeypatch.setenv(k, v)
    for mode in ("401", "500-json", "400-json", "200-error"):
        with echo_server(mode) as server:
            src = PrometheusSource(
                url=url_of(server), token_env="GW_TEST_TOKEN", retries=0, timeout_s=2
            )
            client = PrometheusClient(src, sleep=lambda s: None)
            with pytest.raises(IngestError) as err:
                client.query("up", datetime.now(UTC))
            exc = err.value
            assert_no_secret(str(exc) + repr(exc) + repr(exc.args), f"the {mode} exception")
            shown = "".join(traceback.format_exception(exc))  # what a log with exc_info prints
            assert_no_secret(shown, f"the {mode} traceback")
            assert_no_secret(repr(client.__dict__.get("source")), "the client's source")
