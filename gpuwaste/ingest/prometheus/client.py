"""The one place that talks HTTP to Prometheus (or Thanos, Mimir, VictoriaMetrics).

Plain `requests` with one Session rather than prometheus-api-client (faster on the same raw
range selections: bench/RESULTS.md, "Prometheus client: gpuwaste's vs prometheus-api-client"):
every request has a timeout,
retries are bounded with exponential backoff, the answer is handed on as raw bytes (decoded by
`prometheus.parse.parse_body`, several times faster than `json`), and `Accept-Encoding: identity`
is sent to loopback servers, where compression costs more than it saves.

Retried: connection errors, timeouts, HTTP 429 and 5xx. Not retried: other 4xx (a bad query, a
refused selection): the server's own error text is in the message. Either way the failure is
one `IngestError` sentence naming the URL and the cause; credentials never appear in it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import requests

from gpuwaste.config import PrometheusSource
from gpuwaste.errors import network_reason
from gpuwaste.ingest.base import IngestError
from gpuwaste.ingest.prometheus.parse import ResponseError, SeriesSet, parse_body
from gpuwaste.ingest.secrets import credentials

BACKOFF_S = 0.5
BACKOFF_MAX_S = 8.0
LOOPBACK = {"localhost", "127.0.0.1", "::1", "[::1]"}


class TooManySamples(IngestError):
    """The server refused a selection as too large (HTTP 422 with a sample limit)."""


def _ts(at: datetime) -> str:
    return f"{at.timestamp():.3f}"


class PrometheusClient:
    """`query(promql, at)` and `label_values(...)` against one server, with retries."""

    def __init__(self, source: PrometheusSource, *, sleep: Any = time.sleep) -> None:
        self.source = source
        self.url = source.url
        parts = urlsplit(source.url)
        if parts.username or parts.password:
            shown = parts._replace(netloc=parts.hostname or "").geturl()
            raise IngestError(
                f"the Prometheus URL {shown} carries credentials; remove them and name "
                "environment variables instead (username_env / password_env or token_env)."
            )
        self._sleep = sleep
        creds = credentials(source)
        self._redact = creds.redact  # server text may echo our headers back
        self.session = requests.Session()
        self.session.headers.update({"Accept": "application/json", **creds.headers})
        if creds.basic is not None:
            self.session.auth = creds.basic
        host = urlsplit(source.url).hostname or ""
        if host in LOOPBACK:
            self.session.headers["Accept-Encoding"] = "identity"
        self.session.verify = source.verify_tls
        self.requests_made = 0
        self.bytes_read = 0

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> PrometheusClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ transport
    def get(self, path: str, params: dict[str, Any] | list[tuple[str, str]]) -> bytes:
        """GET `path` with bounded retries; the body on HTTP 200, else one IngestError."""
        url = f"{self.url}{path}"
        attempts = self.source.retries + 1
        cause = "no attempt made"
        for attempt in range(attempts):
            if attempt:
                self._sleep(min(BACKOFF_MAX_S, BACKOFF_S * 2 ** (attempt - 1)))
            try:
                resp = self.session.get(url, params=params, timeout=self.source.timeout_s)
            except requests.exceptions.SSLError as exc:
                raise IngestError(
                    f"Prometheus at {self.url}: TLS verification failed ({_short(exc)}); "
                    "set verify_tls = false only for a server you trust."
                ) from None
            except requests.exceptions.Timeout:
                cause = f"no answer within {self.source.timeout_s:g} s"
                continue
            except requests.exceptions.ConnectionError as exc:
                cause = f"cannot connect: {network_reason(exc)}"
                continue
            except (
                requests.exceptions.ChunkedEncodingError,
                requests.exceptions.ContentDecodingError,
            ) as exc:
                cause = f"the connection closed mid-answer ({_short(exc)})"
                continue
            except requests.exceptions.RequestException as exc:
                raise IngestError(
                    f"Prometheus at {self.url}: request failed ({_short(exc)})."
                ) from None
            self.requests_made += 1
            if resp.status_code == 200:
                self.bytes_read += len(resp.content)
                return resp.content
            detail = _error_text(resp, self._redact)
            if resp.status_code in (429,) or resp.status_code >= 500:
                cause = f"HTTP {resp.status_code}{detail}"
                continue
            if resp.status_code in (401, 403):
                raise IngestError(
                    f"Prometheus at {self.url} refused the credentials (HTTP {resp.status_code}); "
                    "check token_env / username_env / password_env."
                )
            if resp.status_code == 422 and "sample" in detail:
                raise TooManySamples(f"Prometheus at {self.url} refused a selection{detail}.")
            if resp.status_code == 404:
                raise self.not_prometheus(path, f"HTTP 404{detail}")
            raise IngestError(f"Prometheus at {self.url} answered HTTP {resp.status_code}{detail}.")
        raise IngestError(
            f"Prometheus at {self.url} is unreachable: {cause} (after {attempts} attempt(s))."
        )

    # ------------------------------------------------------------------ API
    def query(self, promql: str, at: datetime) -> SeriesSet:
        """`/api/v1/query` at time `at` (a raw range selector returns the real samples)."""
        path = "/api/v1/query"
        body = self.get(path, {"query": promql, "time": _ts(at)})
        if not _is_json_object(body):
            raise self.not_prometheus(path, _describe(body))
        try:
            return parse_body(body)
        except ResponseError as exc:
            raise IngestError(
                f"Prometheus at {self.url}: unexpected answer to {promql!r}: "
                f"{self._redact(str(exc))}."
            ) from None

    def metric_names(self, match: str, start: datetime, end: datetime) -> set[str]:
        """Names of the metrics with series matching `match` between `start` and `end`."""
        path = "/api/v1/label/__name__/values"
        body = self.get(path, [("match[]", match), ("start", _ts(start)), ("end", _ts(end))])
        if not _is_json_object(body):
            raise self.not_prometheus(path, _describe(body))
        try:
            payload = json.loads(body)
        except ValueError:
            raise IngestError(
                f"Prometheus at {self.url}: the answer to {path} is not valid JSON (cut short?)."
            ) from None
        if not isinstance(payload, dict) or "status" not in payload:
            raise self.not_prometheus(path, "JSON without a Prometheus status")
        if payload.get("status") != "success":
            why = self._redact(str(payload.get("error", "status is not success")))[:300]
            raise IngestError(f"Prometheus at {self.url}: the metric names query failed: {why}.")
        return {str(x) for x in payload.get("data") or []}

    def not_prometheus(self, path: str, answer: str) -> IngestError:
        """The sentence for a server that does not speak the Prometheus HTTP API."""
        return IngestError(
            f"the server at {self.url} is not a Prometheus API: {path} answered {answer}, not "
            "Prometheus JSON; give the URL of Prometheus itself (e.g. http://prometheus:9090, "
            "with any path prefix it is served under)."
        )


def _is_json_object(body: bytes) -> bool:
    return body.lstrip()[:1] == b"{"


def _describe(body: bytes) -> str:
    """What a non-Prometheus body looks like, in a few words."""
    text = body.decode("utf-8", "replace").strip()
    if not text:
        return "an empty body"
    if text[:100].lower().startswith(("<!doctype html", "<html")) or "<html" in text[:300].lower():
        return "an HTML page"
    return repr(text.splitlines()[0][:60])


def _short(exc: BaseException) -> str:
    text = str(exc)
    for marker in ("Failed to establish a new connection: ", "Caused by "):
        if marker in text:
            text = text.split(marker, 1)[1]
    text = text.strip("()'\" ")
    return text[:200]


def _error_text(resp: requests.Response, redact: Callable[[str], str] = str) -> str:
    try:
        payload = resp.json()
    except ValueError:
        text = redact(resp.text).strip().splitlines()[0][:200] if resp.text.strip() else ""
        return f": {text}" if text else ""
    if isinstance(payload, dict) and payload.get("error"):
        return f": {redact(str(payload['error']))[:300]}"
    return ""
