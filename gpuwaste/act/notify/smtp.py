"""Email through the standard library (`smtplib`): STARTTLS when the server offers it, AUTH with
a password from the environment, and a DATA phase split so the ledger knows whether the server
can hold the complete message (see ledger.py).

The password is read by the caller from the environment variable the operator names, passed
here, and never written anywhere: error messages name the server and the recipient, and quote
the server's reply, never the credentials.
"""

from __future__ import annotations

import re
import smtplib
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from email.message import EmailMessage
from email.policy import SMTP
from email.utils import formatdate
from urllib.parse import unquote, urlsplit

from gpuwaste.errors import GpuwasteError, network_reason
from gpuwaste.text import printable

DEFAULT_PORT = 25
TIMEOUT_S = 30.0


class DeliveryError(GpuwasteError):
    """One message could not be delivered; the message says why (no secret in it)."""


@dataclass(frozen=True)
class SmtpServer:
    host: str
    port: int
    user: str | None

    @property
    def name(self) -> str:
        return f"{self.host}:{self.port}"


def parse_smtp_url(url: str, user: str | None = None) -> SmtpServer:
    """`smtp://[USER@]HOST[:PORT]`; a password in the URL is refused (it belongs in the
    environment). `user` (`[notify] smtp_user`) is the login user when the URL names none; the
    two naming different users is refused."""
    parts = urlsplit(url)
    try:
        port = parts.port or DEFAULT_PORT
    except ValueError:
        port = -1
    if parts.scheme != "smtp" or not parts.hostname or port <= 0 or parts.path not in ("", "/"):
        raise GpuwasteError(
            f"--smtp '{printable(parts.scheme)}://{printable(parts.hostname or '')}...' is not "
            "smtp://HOST:PORT (STARTTLS is used when the server offers it)."
        )
    if parts.password is not None:
        raise GpuwasteError(
            "--smtp: the URL holds a password; give it in an environment variable named by "
            "--smtp-password-env instead."
        )
    in_url = unquote(parts.username) if parts.username is not None else None
    if user is not None and in_url is not None and in_url != user:
        raise GpuwasteError(
            f"[notify] smtp_user '{printable(user)}' and the user '{printable(in_url)}' of the "
            "SMTP URL differ; give the login user in one of them."
        )
    return SmtpServer(parts.hostname, port, in_url if in_url is not None else user)


def build_email(sender: str, to: str, subject: str, body: str, message_id: str) -> EmailMessage:
    msg = EmailMessage()
    msg["From"] = sender
    msg["To"] = to
    msg["Subject"] = subject
    msg["Date"] = formatdate(usegmt=True)
    msg["Message-ID"] = message_id
    msg["Auto-Submitted"] = "auto-generated"
    msg.set_content(body)
    return msg


def _payload(msg: EmailMessage) -> bytes:
    """The message as DATA bytes without the final '.': CRLF line ends, leading dots doubled."""
    # Headers on one line up to RFC 5322's 998 characters: at 78, the email package folds a
    # subject that fits alone right after "Subject:", and readers then see a leading space.
    data = msg.as_bytes(policy=SMTP.clone(max_line_length=998))
    data = re.sub(rb"(?m)^\.", b"..", data)
    return data if data.endswith(b"\r\n") else data + b"\r\n"


def _reply(code: int, text: bytes | str) -> str:
    words = text.decode(errors="replace") if isinstance(text, bytes) else text
    return printable(f"{code} {words}".strip())


def _open(server: SmtpServer, password: str | None, timeout: float) -> smtplib.SMTP:
    smtp = smtplib.SMTP(server.host, server.port, timeout=timeout)
    smtp.ehlo()
    if smtp.has_extn("starttls"):
        smtp.starttls(context=ssl.create_default_context())
        smtp.ehlo()
    elif password is not None:
        smtp.close()
        raise DeliveryError(
            f"the server {server.name} does not offer STARTTLS: the password is not sent in clear"
        )
    if password is not None:
        try:
            smtp.login(server.user or "", password)
        except smtplib.SMTPServerDisconnected:
            raise DeliveryError(
                f"the server {server.name} refused the login (it closed the connection)"
            ) from None
    return smtp


def _transaction(smtp: smtplib.SMTP, msg: EmailMessage, before_end: Callable[[], None]) -> None:
    sender, to = str(msg["From"]), str(msg["To"])
    code, text = smtp.mail(sender)
    if code != 250:
        raise DeliveryError(f"the server refused the sender {sender} ({_reply(code, text)})")
    code, text = smtp.rcpt(to)
    if code not in (250, 251):
        raise DeliveryError(f"the server refused the recipient ({_reply(code, text)})")
    code, text = smtp.docmd("DATA")
    if code != 354:
        raise DeliveryError(f"the server refused the message ({_reply(code, text)})")
    smtp.send(_payload(msg))
    before_end()  # from here on the server may hold the whole message
    smtp.send(b".\r\n")
    code, text = smtp.getreply()
    if code != 250:
        raise DeliveryError(f"the server refused the message ({_reply(code, text)})")


def send_email(
    server: SmtpServer,
    password: str | None,
    msg: EmailMessage,
    before_end: Callable[[], None],
    timeout: float = TIMEOUT_S,
) -> None:
    """Deliver one message on its own connection; `before_end` runs just before the final '.'
    of DATA. DeliveryError (one sentence, no secret) on any refusal or network failure."""
    try:
        smtp = _open(server, password, timeout)
        try:
            _transaction(smtp, msg, before_end)
        finally:
            try:
                smtp.quit()
            except (smtplib.SMTPException, OSError):
                smtp.close()
    except DeliveryError:
        raise
    except smtplib.SMTPAuthenticationError as exc:
        raise DeliveryError(
            f"the server {server.name} refused the login ({_reply(exc.smtp_code, exc.smtp_error)})"
        ) from None
    except smtplib.SMTPResponseException as exc:
        raise DeliveryError(
            f"the server {server.name} answered {_reply(exc.smtp_code, exc.smtp_error)}"
        ) from None
    except (smtplib.SMTPException, ssl.SSLError, OSError) as exc:
        reason = printable(network_reason(exc))
        raise DeliveryError(f"cannot talk to the SMTP server {server.name} ({reason})") from None


__all__ = ["DeliveryError", "SmtpServer", "build_email", "parse_smtp_url", "send_email"]
