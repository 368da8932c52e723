"""`gpuwaste dashboard`: run the Streamlit app over a warehouse, on 127.0.0.1 by default."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from gpuwaste.cli_common import DataDirOpt
from gpuwaste.config import CONFIG_ENV, DATA_DIR_ENV
from gpuwaste.errors import GpuwasteError, UsageError

APP = Path(__file__).resolve().parent / "app.py"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8501


def streamlit_command(host: str, port: int) -> list[str]:
    """The `streamlit run` command line, through gpuwaste.dashboard.server (which imports the
    pages' modules first); no secret and no data path on it."""
    return [
        sys.executable, "-m", "gpuwaste.dashboard.server", "run", str(APP),
        "--server.address", host,
        "--server.port", str(port),
        "--server.headless", "true",
        "--browser.gatherUsageStats", "false",
        "--server.fileWatcherType", "none",
        "--server.runOnSave", "false",
        "--client.toolbarMode", "viewer",
    ]  # fmt: skip


_Handler = Callable[[int, Any], Any] | int | None


def _on_signals(handler: Any) -> dict[int, _Handler]:
    """Install `handler` (or a dict of previous handlers) for SIGTERM and SIGHUP, so that stopping
    `gpuwaste dashboard` stops its streamlit child too; returns the handlers it replaced."""
    previous: dict[int, _Handler] = {}
    if threading.current_thread() is not threading.main_thread():
        return previous
    for sig in (signal.SIGTERM, signal.SIGHUP):
        new = handler.get(sig) if isinstance(handler, dict) else handler
        if new is None:
            continue
        previous[sig] = signal.signal(sig, new)
    return previous


def serve(
    data_dir: Path, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, config: Path | None = None
) -> None:
    """Run the dashboard over `data_dir` until interrupted (what `gpuwaste demo` calls); the
    pages read `config` (its `[sql]` bounds) when given."""
    if not 0 < port < 65536:
        raise UsageError(f"--port {port} is not accepted: it must be a TCP port, 1-65535.")
    env = {**os.environ, DATA_DIR_ENV: str(Path(data_dir).resolve())}
    if config is not None:
        env[CONFIG_ENV] = str(Path(config).resolve())
    print(f"gpuwaste dashboard on http://{host}:{port} over {data_dir} (Ctrl-C to stop)",
          file=sys.stderr)  # fmt: skip
    proc = subprocess.Popen(streamlit_command(host, port), env=env)
    stopping: list[int] = []

    def stop(signum: int, _frame: object) -> None:
        stopping.append(signum)
        proc.terminate()

    previous = _on_signals(stop)
    try:
        code = proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        raise
    finally:
        _on_signals(previous)
    if code != 0 and not stopping:
        raise GpuwasteError(
            f"the dashboard server stopped with status {code} (is port {port} on {host} free?)."
        )


def register(app: typer.Typer) -> None:
    """Add the dashboard command to the main app."""

    @app.command()
    def dashboard(
        data_dir: DataDirOpt = None,
        port: Annotated[int, typer.Option(envvar="PORT", help="Port to listen on.")] = DEFAULT_PORT,
        host: Annotated[
            str, typer.Option(help="Address to listen on (127.0.0.1: this machine only).")
        ] = DEFAULT_HOST,
        config: Annotated[
            Path | None, typer.Option("--config", help="gpuwaste.toml to read.")
        ] = None,
    ) -> None:
        """The operator dashboard (Streamlit) over the warehouse's result tables."""
        from gpuwaste.config import load_settings

        settings = load_settings(config, data_dir)
        serve(settings.data_dir, host, port, config)
