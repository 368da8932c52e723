"""A real HTTP server on loopback (http.server) that receives webhook posts for the tests.

It answers 200 on every path except those it is told to fail (`fail_paths`, a real HTTP 500),
and keeps every request's path and JSON body.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Receiver:
    port: int
    posts: list[tuple[str, Any]] = field(default_factory=list)
    fail_paths: set[str] = field(default_factory=set)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"


@contextmanager
def http_receiver() -> Iterator[Receiver]:
    receiver = Receiver(0)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path in receiver.fail_paths:
                self.send_response(500)
                self.end_headers()
                self.wfile.write(b"internal error")
                return
            receiver.posts.append((self.path, json.loads(body)))
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver.port = int(server.server_address[1])
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
