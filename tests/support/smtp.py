"""A real SMTP server on loopback (aiosmtpd) for the notify tests.

It keeps every message it accepted (parsed), refuses the recipients it is told to refuse with a
real 550, can hold a transaction at RCPT, or after it has kept a message and before it answers the end of
DATA, until the test releases it (to kill a client mid-send), and can offer STARTTLS with a self-signed certificate made by
`openssl` and require AUTH (PLAIN/LOGIN) over it.
"""

from __future__ import annotations

import asyncio
import ssl
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.message import EmailMessage
from pathlib import Path
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP as SMTPServer
from aiosmtpd.smtp import AuthResult, Envelope, Session
from harness.components import free_port, require


@dataclass
class Received:
    envelope_to: list[str]
    message: EmailMessage


@dataclass
class Handler:
    refuse: set[str] = field(default_factory=set)
    hold_at: str | None = None  # "rcpt" | "data": wait there until `release` is set
    arrived: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    received: list[Received] = field(default_factory=list)
    logins: list[tuple[str, str]] = field(default_factory=list)

    async def _hold(self, stage: str) -> None:
        if self.hold_at == stage:
            self.arrived.set()
            await asyncio.get_running_loop().run_in_executor(None, self.release.wait, 60)

    async def handle_RCPT(
        self, server: SMTPServer, session: Session, envelope: Envelope, address: str, options: Any
    ) -> str:
        await self._hold("rcpt")
        if address in self.refuse:
            return "550 5.1.1 No such user here"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: SMTPServer, session: Session, envelope: Envelope) -> str:
        raw = envelope.original_content or b""
        msg = message_from_bytes(raw, policy=policy.default)
        assert isinstance(msg, EmailMessage)
        # committed before answering, as a mail server queues a message before its 250: a client
        # killed while the answer is held leaves a delivered message it never heard about
        self.received.append(Received(list(envelope.rcpt_tos), msg))
        await self._hold("data")
        return "250 Message accepted for delivery"


@dataclass
class SmtpFixture:
    handler: Handler
    port: int
    cert: Path | None = None

    @property
    def url(self) -> str:
        return f"smtp://127.0.0.1:{self.port}"

    def to(self, address: str) -> list[EmailMessage]:
        return [r.message for r in self.handler.received if address in r.envelope_to]


def self_signed_cert(folder: Path) -> tuple[Path, Path]:
    """(certificate, key) for 127.0.0.1, made by openssl."""
    openssl = require("openssl")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


@contextmanager
def smtp_server(
    *,
    tls_dir: Path | None = None,
    credentials: tuple[str, str] | None = None,
) -> Iterator[SmtpFixture]:
    """A running server; with `tls_dir`, STARTTLS is offered (and required); with
    `credentials`, AUTH with exactly that user and password is required."""
    handler = Handler()
    port = free_port()
    kwargs: dict[str, Any] = {}
    cert = None
    if tls_dir is not None:
        cert, key = self_signed_cert(tls_dir)
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(cert, key)
        kwargs.update(tls_context=ctx, require_starttls=True)
    if credentials is not None:

        def authenticate(
            server: SMTPServer, session: Session, envelope: Envelope, mechanism: str, data: Any
        ) -> AuthResult:
            login = data.login.decode()
            password = data.password.decode()
            handler.logins.append((login, password))
            return AuthResult(success=(login, password) == credentials)

        kwargs.update(authenticator=authenticate, auth_required=True, auth_require_tls=True)
    controller = Controller(handler, hostname="127.0.0.1", port=port, **kwargs)
    controller.start()
    try:
        yield SmtpFixture(handler, port, cert)
    finally:
        handler.release.set()
        controller.stop()
