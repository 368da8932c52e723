"""The exporter's HTTP server: prometheus_client's own, with only the gpuwaste collector."""

from __future__ import annotations

import signal
import sys
import threading
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server

from gpuwaste.errors import GpuwasteError
from gpuwaste.exporter.collector import WasteCollector


def start(collector: WasteCollector, host: str, port: int) -> WSGIServer:
    """Serve `/metrics` on host:port in a daemon thread (port 0: any free port, see
    `server.server_port`); GpuwasteError when the address cannot be listened on."""
    if not 0 <= port < 65536:
        raise GpuwasteError(f"port {port} is not a TCP port (1-65535, or 0 for any free port).")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    try:
        httpd, _thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise GpuwasteError(f"cannot listen on {host}:{port}: {exc.strerror or exc}.") from None
    return httpd


def serve_forever(collector: WasteCollector, host: str, port: int) -> None:
    """Serve until SIGTERM, SIGHUP or Ctrl-C; the first read of the figures starts at once."""
    httpd = start(collector, host, port)
    print(f"gpuwaste exporter on http://{host}:{httpd.server_port}/metrics over "
          f"{collector.data_dir} (Ctrl-C to stop)", file=sys.stderr)  # fmt: skip
    collector.start_reading()
    stop = threading.Event()
    previous = {
        sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGHUP)
    }
    try:
        while not stop.wait(1.0):
            pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        httpd.shutdown()
        httpd.server_close()
