"""Chat webhooks (Slack and Mattermost incoming webhooks: a JSON `{"text": ...}` POST) through
apprise's JSON plugin.

Apprise has Slack and Mattermost plugins, but they build the webhook URL themselves (Slack's
posts only to hooks.slack.com; Mattermost's wants `/hooks/TOKEN` on its host), so a webhook URL
as the operator copies it is posted with apprise's generic JSON plugin, its payload mapped to
the one field both accept (`:message=text`, the other fields dropped). Apprise reports a refusal
truthfully (an HTTP status outside 2xx or a connection error makes `notify()` false); the cause
is in its log, which is captured and reduced to "HTTP 500" or "connection error".

A webhook URL usually holds a secret token in its path: it is never written out. The ledger
and every message name it by `redacted(url)` (scheme and host) and `fingerprint(url)`.
"""

from __future__ import annotations

import hashlib
import logging
import re
from urllib.parse import urlsplit

from gpuwaste.act.notify.smtp import DeliveryError
from gpuwaste.errors import GpuwasteError
from gpuwaste.text import printable

PAYLOAD = ":version=&:title=&:type=&:attachments=&:message=text"


def fingerprint(url: str) -> str:
    return hashlib.sha256(url.encode()).hexdigest()[:12]


def redacted(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or "?"
    port = f":{parts.port}" if parts.port else ""
    return printable(f"{parts.scheme}://{host}{port}/... (#{fingerprint(url)})")


def apprise_url(url: str) -> str:
    """The apprise JSON-plugin URL that posts `{"text": body}` to `url`."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise GpuwasteError("--webhook must be an http:// or https:// URL.")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise GpuwasteError(
            f"--webhook {redacted(url)}: a URL with a query, fragment or credentials is not "
            "supported (Slack and Mattermost webhooks have none)."
        )
    scheme = "jsons" if parts.scheme == "https" else "json"
    port = f":{parts.port}" if parts.port else ""
    return f"{scheme}://{parts.hostname}{port}{parts.path or '/'}?{PAYLOAD}"


def _cause(log: str) -> str:
    m = re.search(r"error=(\d{3})", log)
    if m:
        return f"HTTP {m.group(1)}"
    if "connection error" in log.lower():
        return "connection error"
    return "not delivered"


def post(url: str, text: str) -> None:
    """POST `{"text": text}` to the webhook; DeliveryError naming the cause if refused."""
    import apprise

    target = apprise.Apprise()
    if not target.add(apprise_url(url)):
        raise DeliveryError(f"apprise does not accept the webhook {redacted(url)}")
    with apprise.LogCapture(level=logging.WARNING) as logs:
        ok = bool(target.notify(body=text, title=""))
    if not ok:
        captured = logs.getvalue() if hasattr(logs, "getvalue") else ""
        raise DeliveryError(f"the webhook refused the post ({_cause(captured)})")


__all__ = ["apprise_url", "fingerprint", "post", "redacted"]
