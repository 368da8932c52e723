"""A tiny HTTP server on 127.0.0.1 that answers every request with a chosen status and a body
that echoes the request's headers back (as a careless proxy or a debugging endpoint would), so a
test can see whether a credential sent in a header ever surfaces in gpuwaste's output.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class EchoServer(ThreadingHTTPServer):
    daemon_threads = True
    mode = "401"  # "<status>" | "<status>-json" | "200-error" | "200-empty"
    seen: list[str]


class _Handler(BaseHTTPRequestHandler):
    server: EchoServer

    def log_message(self, format: str, *args: object) -> None:  # keep test output clean
        return

    def do_GET(self) -> None:
        headers = "; ".join(f"{k}: {v}" for k, v in self.headers.items())
        self.server.seen.append(headers)
        mode = self.server.mode
        if mode == "200-empty":
            status, body = (
                200,
                {"status": "success", "data": {"resultType": "matrix", "result": []}},
            )
            if "/label/" in self.path:
                body = {"status": "success", "data": []}
            self._send(status, json.dumps(body).encode(), "application/json")
        elif mode == "200-error":
            body = {"status": "error", "errorType": "bad_data", "error": f"echo {headers}"}
            self._send(200, json.dumps(body).encode(), "application/json")
        elif mode.endswith("-json"):
            body = {"status": "error", "errorType": "echo", "error": f"echo {headers}"}
            self._send(int(mode.split("-")[0]), json.dumps(body).encode(), "application/json")
        else:
            self._send(int(mode), f"echo {headers}\n{self.path}\n".encode(), "text/plain")

    def _send(self, status: int, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@contextmanager
def echo_server(mode: str = "401") -> Iterator[EchoServer]:
    server = EchoServer(("127.0.0.1", 0), _Handler)
    server.mode = mode
    server.seen = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def url_of(server: EchoServer) -> str:
    host, port = server.server_address[:2]
    return f"http://{host!s}:{port}"
