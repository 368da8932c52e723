"""A faulty HTTP proxy on 127.0.0.1 in front of a real Prometheus.

Each request gets an action from the proxy's `plan(n)` (n = 0, 1, ... in arrival order):

- `pass`: forward and answer what Prometheus answered;
- `503`: answer 503 Service Unavailable (Prometheus is never asked);
- `slow`: forward, then wait `delay_s` before answering (past the client's timeout);
- `cut`: answer 200 with the full Content-Length but only half the body, then close the
  connection (the server went away mid-response);
- `truncated`: answer 200 with half the JSON body and a Content-Length that matches it (a
  proxy or a full disk truncated the answer: HTTP is fine, the JSON is not);
- `error-json`: answer 200 with a well-formed Prometheus error (`"status": "error"`).
"""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

Plan = Callable[[int], str]


class FaultProxy(ThreadingHTTPServer):
    daemon_threads = True
    upstream: str
    plan: Plan
    delay_s: float = 3.0
    actions: list[str]
    lock: threading.Lock

    def next_action(self) -> str:
        with self.lock:
            action = self.plan(len(self.actions))
            self.actions.append(action)
            return action

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"


class _Handler(BaseHTTPRequestHandler):
    server: FaultProxy

    def log_message(self, format: str, *args: object) -> None:
        return

    def do_GET(self) -> None:
        action = self.server.next_action()
        if action == "503":
            self._send(503, b'{"status":"error","errorType":"unavailable","error":"busy"}')
            return
        if action == "error-json":
            self._send(200, b'{"status":"error","errorType":"execution","error":"query failed"}')
            return
        status, body = self._forward()
        try:
            if action == "slow":
                time.sleep(self.server.delay_s)
                self._send(status, body)
            elif action == "cut":
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body[: len(body) // 2])
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(2)
            elif action == "truncated":
                self._send(200, body[: max(1, len(body) // 2)])
            else:
                self._send(status, body)
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass  # the client gave up (timeout): nothing to answer

    def _forward(self) -> tuple[int, bytes]:
        up = urlsplit(self.server.upstream)
        conn = http.client.HTTPConnection(up.hostname or "127.0.0.1", up.port, timeout=60)
        try:
            conn.request("GET", self.path, headers={"Accept": "application/json"})
            resp = conn.getresponse()
            return resp.status, resp.read()
        except OSError:
            return 502, b'{"status":"error","errorType":"proxy","error":"upstream unreachable"}'
        finally:
            conn.close()

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@contextmanager
def fault_proxy(upstream: str, plan: Plan | None = None) -> Iterator[FaultProxy]:
    proxy = FaultProxy(("127.0.0.1", 0), _Handler)
    proxy.upstream = upstream
    proxy.plan = plan or (lambda n: "pass")
    proxy.actions = []
    proxy.lock = threading.Lock()
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        proxy.shutdown()
        proxy.server_close()
        thread.join(timeout=5)


def at(first: int, action: str, count: int = 1) -> Plan:
    """`action` for requests first .. first+count-1, `pass` otherwise."""
    return lambda n: action if first <= n < first + count else "pass"
