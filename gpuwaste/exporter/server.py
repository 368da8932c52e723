"""The exporter's HTTP server: prometheus_client's WSGI app (only the gpuwaste collector) behind a
selector-based server of the standard library (asyncio).

prometheus_client's own `start_http_server` is wsgiref's server with a thread per connection and
a listen backlog of 5: under 200 concurrent scrapers scrapes timed out, and a connection that
sends nothing, or half a request, held its thread forever, a thread per such socket
(bench/RESULTS.md, "The exporter under 200 concurrent scrapers"). Here one event-loop thread
reads every request, so an idle connection costs a socket, not a thread, and is closed after
`idle_timeout_s`; the listen backlog is BACKLOG; complete requests are answered by WORKERS
threads (a first scrape waits there for the figures, never the loop), and requests alike that
arrive while one is answered share its answer. Every response closes its connection, as
wsgiref's HTTP/1.0 server did.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import unquote

from prometheus_client import CollectorRegistry, make_wsgi_app

from gpuwaste.errors import GpuwasteError, UsageError
from gpuwaste.exporter.collector import WasteCollector

BACKLOG = 1024  # connections the kernel queues before the loop accepts them
WORKERS = 4  # threads that build responses; a scrape of cached figures takes milliseconds
IDLE_TIMEOUT_S = 10.0  # a connection's request must arrive, and its answer leave, within this
MAX_HEAD_BYTES = 16 * 1024  # request line and headers; a longer head is dropped
STOP_WAIT_S = 10.0  # on a stop, how long a running read of the figures may take to end

_REASONS = {400: "Bad Request", 500: "Internal Server Error"}
# What the app's answer depends on: requests alike in these share one answer (`_answer`).
_SAME_ANSWER = (
    "REQUEST_METHOD",
    "PATH_INFO",
    "QUERY_STRING",
    "HTTP_ACCEPT",
    "HTTP_ACCEPT_ENCODING",
)

log = logging.getLogger("gpuwaste.exporter")

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class MetricsServer:
    """Serves a WSGI app on a listening socket from an event loop in a daemon thread.

    `server_port`, `shutdown()` and `server_close()` as on the socketserver it replaces.
    """

    def __init__(self, app: WsgiApp, sock: socket.socket, idle_timeout_s: float) -> None:
        self.app = app
        self.idle_timeout_s = idle_timeout_s
        self.server_port: int = sock.getsockname()[1]
        self._sock = sock
        self._pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="gpuwaste-exporter")
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._failed: BaseException | None = None
        self._building: dict[tuple[object, ...], asyncio.Future[bytes]] = {}
        self._thread = threading.Thread(
            target=self._run, name="gpuwaste-exporter-http", daemon=True
        )
        self._thread.start()
        self._ready.wait()
        if self._failed is not None:
            raise self._failed

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._server = self._loop.run_until_complete(
                asyncio.start_server(self._serve, sock=self._sock, limit=MAX_HEAD_BYTES)
            )
        except BaseException as exc:  # handed to the starting thread
            self._failed = exc
            self._ready.set()
            return
        self._ready.set()
        self._loop.run_forever()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                head = await asyncio.wait_for(
                    reader.readuntil(b"\r\n\r\n"), timeout=self.idle_timeout_s
                )
            except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                return  # idle, closed half-way, or a head too long: close without an answer
            environ = wsgi_environ(head, writer.get_extra_info("peername"))
            if environ is None:
                response = plain_response(400, b"# HTTP 400: not an HTTP request\n")
            else:
                response = await self._answer(environ)
            writer.write(response)
            await asyncio.wait_for(writer.drain(), timeout=self.idle_timeout_s)
        except (TimeoutError, ConnectionError):
            pass  # a client that does not read its answer, or went away
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, TimeoutError):
                await asyncio.wait_for(writer.wait_closed(), timeout=self.idle_timeout_s)

    async def _answer(self, environ: dict[str, Any]) -> bytes:
        """The answer to a request, shared with the requests for the same thing that arrive
        while it is built: 200 scrapers at once cost a few builds, not 200 (each takes a few
        milliseconds of the GIL), and no answer was started before its request arrived but
        while an identical one was being answered."""
        key = tuple(environ.get(k) for k in _SAME_ANSWER)
        answer = self._building.get(key)
        if answer is None:
            answer = asyncio.get_running_loop().run_in_executor(self._pool, self._respond, environ)
            self._building[key] = answer
            answer.add_done_callback(lambda _: self._building.pop(key, None))
        return await asyncio.shield(answer)

    def _respond(self, environ: dict[str, Any]) -> bytes:
        """The app's whole answer for one request, as bytes on the wire."""
        started: list[Any] = []

        def start_response(status: str, headers: list[tuple[str, str]], *_: object) -> None:
            started[:] = [status, headers]

        try:
            body = b"".join(self.app(environ, start_response))
        except Exception as exc:  # the collector never raises; an answer all the same
            log.warning(
                "answering %s failed: %s: %s", environ["PATH_INFO"], type(exc).__name__, exc
            )
            return plain_response(500, b"# HTTP 500: the answer could not be built\n")
        status, headers = started
        return http_response(status, headers, body, head_only=environ["REQUEST_METHOD"] == "HEAD")

    def shutdown(self) -> None:
        """Stop accepting and close every connection; returns when the loop has stopped."""
        if not self._thread.is_alive():
            return

        async def stop() -> None:
            self._server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    def server_close(self) -> None:
        self.shutdown()
        if not self._loop.is_closed():
            self._loop.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._sock.close()


def wsgi_environ(head: bytes, peer: object) -> dict[str, Any] | None:
    """The WSGI environ of a request head (request line and headers), or None when it is not
    one. The app reads the method, the path, the query and the Accept headers."""
    try:
        lines = head.decode("latin-1").split("\r\n")
        method, target, version = lines[0].split(" ")
    except ValueError:
        return None
    if not version.startswith("HTTP/"):
        return None
    path, _, query = target.partition("?")
    environ: dict[str, Any] = {
        "REQUEST_METHOD": method,
        "PATH_INFO": unquote(path),
        "QUERY_STRING": query,
        "SERVER_PROTOCOL": version,
        "REMOTE_ADDR": peer[0] if isinstance(peer, tuple) else "",
        "wsgi.url_scheme": "http",
    }
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            environ["HTTP_" + name.strip().upper().replace("-", "_")] = value.strip()
    return environ


def http_response(
    status: str, headers: list[tuple[str, str]], body: bytes, *, head_only: bool = False
) -> bytes:
    lines = [f"HTTP/1.1 {status}"]
    lines += [f"{k}: {v}" for k, v in headers if k.lower() not in ("content-length", "connection")]
    lines += [f"Content-Length: {len(body)}", "Connection: close", "", ""]
    return "\r\n".join(lines).encode("latin-1") + (b"" if head_only else body)


def plain_response(code: int, body: bytes) -> bytes:
    return http_response(f"{code} {_REASONS[code]}", [("Content-Type", "text/plain")], body)


def listening_socket(host: str, port: int) -> socket.socket:
    """A socket listening on host:port (IPv4 or IPv6, as the address says) with BACKLOG."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family = infos[0][0] if infos else socket.AF_INET
    address = infos[0][4][0] if infos else host
    return socket.create_server((address, port), family=family, backlog=BACKLOG)


def start(
    collector: WasteCollector, host: str, port: int, idle_timeout_s: float = IDLE_TIMEOUT_S
) -> MetricsServer:
    """Serve `/metrics` on host:port in a daemon thread (port 0: any free port, see
    `server.server_port`); UsageError for a port out of range (the configuration's port is
    checked on load, so it came from `--port`), GpuwasteError when the address cannot be
    listened on."""
    if not 0 <= port < 65536:
        raise UsageError(
            f"--port {port} is not accepted: it must be a TCP port, 1-65535 (or 0 for any free "
            "port)."
        )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    try:
        sock = listening_socket(host, port)
    except OSError as exc:
        raise GpuwasteError(f"cannot listen on {host}:{port}: {exc.strerror or exc}.") from None
    return MetricsServer(make_wsgi_app(registry), sock, idle_timeout_s)


def raise_open_files_limit() -> None:
    """Allow as many open files as the hard limit allows: each scraper, idle or not, holds one
    socket (the soft limit is often 1,024)."""
    import resource  # POSIX only

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 65536 if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < wanted:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


def serve_forever(
    collector: WasteCollector, host: str, port: int, idle_timeout_s: float = IDLE_TIMEOUT_S
) -> None:
    """Serve until SIGTERM, SIGHUP or Ctrl-C; the first read of the figures starts at once."""
    raise_open_files_limit()
    stop = threading.Event()
    # handled before the address is announced, so that a stop sent as soon as it is is a clean
    # stop; Ctrl-C too, so that it waits for a running read like the others (`close`)
    previous = {
        sig: signal.signal(sig, lambda *_: stop.set())
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
    }
    try:
        httpd = start(collector, host, port, idle_timeout_s)
        try:
            print(f"gpuwaste exporter on http://{host}:{httpd.server_port}/metrics over "
                  f"{collector.data_dir} (Ctrl-C to stop)", file=sys.stderr)  # fmt: skip
            collector.start_reading()
            while not stop.wait(1.0):
                pass
        finally:
            httpd.server_close()
            stopped = collector.close(STOP_WAIT_S)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if not stopped:
        # exiting the interpreter now would abort the process (see WasteCollector.close); the
        # read is read-only, so leaving it unfinished loses nothing
        log.warning(
            "still reading the figures after %.0f s: stopping without waiting longer", STOP_WAIT_S
        )
        sys.stderr.flush()
        os._exit(0)
