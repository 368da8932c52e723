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

The message's text is markup to both. Slack reads `<!channel>` as an @channel ping and
`<url|text>` as a link, and asks that `&`, `<` and `>` be sent as `&amp;`, `&lt;` and `&gt;`
when they are not markup ("Formatting text for app surfaces", Escaping text:
https://api.slack.com/reference/surfaces/formatting#escaping). Mattermost translates the same
Slack forms (`<!channel>`, `<url|text>`) and renders the rest as Markdown, where those entities
show as the characters (https://developers.mattermost.com/integrate/slash-commands/slack/). So
every name from the data goes into the text through `escape`; gpuwaste's own words and links
do not. Mattermost also pings a channel for `@channel`, `@all` and `@here` typed as text, and
makes `[text](url)` a link: `escape` puts a word joiner (U+2060, invisible and not a name
character) after such an `@` and between `]` and `(`, which neither service then reads as markup.
"""

from __future__ import annotations

import hashlib
import logging
import re
from urllib.parse import urlsplit

from gpuwaste.act.notify.smtp import DeliveryError
from gpuwaste.errors import UsageError
from gpuwaste.text import printable

PAYLOAD = ":version=&:title=&:type=&:attachments=&:message=text"
WORD_JOINER = "\u2060"
_CHANNEL_MENTION = re.compile(r"@(?=(?:channel|all|here)\b)", re.IGNORECASE)


def escape(text: str) -> str:
    """Untrusted text for a Slack or Mattermost message: control characters escaped as in the
    terminal (`printable`), then `&`, `<`, `>` as the HTML entities both decode for display, so
    a name cannot ping a channel or make a link; Mattermost's `@channel` and `[text](url)` are
    broken by a word joiner."""
    text = printable(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = _CHANNEL_MENTION.sub("@" + WORD_JOINER, text)
    return text.replace("](", "]" + WORD_JOINER + "(")


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
        raise UsageError("--webhook must be an http:// or https:// URL.")
    if parts.query or parts.fragment or parts.username or parts.password:
        raise UsageError(
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


__all__ = ["apprise_url", "escape", "fingerprint", "post", "redacted"]
