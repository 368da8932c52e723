"""Credentials come from environment variables only, and never show up in messages."""

from __future__ import annotations

import pytest

from gpuwaste.config import PrometheusSource
from gpuwaste.ingest.base import IngestError
from gpuwaste.ingest.prometheus.client import PrometheusClient
from gpuwaste.ingest.secrets import MissingSecret, credentials


def test_bearer_and_basic_from_the_environment() -> None:
    src = PrometheusSource(url="https://p", token_env="TOK", username_env="U", password_env="P")
    creds = credentials(src, {"TOK": "abc\n", "U": "me", "P": "pw"})
    assert creds.headers == {"Authorization": "Bearer abc"}
    assert creds.basic == ("me", "pw")
    assert "abc" not in repr(creds) and "pw" not in repr(creds)


def test_missing_variable_is_named_not_its_value() -> None:
    src = PrometheusSource(url="https://p", token_env="GPUWASTE_NOPE")
    with pytest.raises(MissingSecret, match="GPUWASTE_NOPE"):
        credentials(src, {})
    with pytest.raises(MissingSecret, match="both username_env and password_env"):
        credentials(PrometheusSource(url="https://p", username_env="U"), {"U": "x"})


def test_url_with_embedded_credentials_is_refused() -> None:
    with pytest.raises(IngestError) as err:
        PrometheusClient(PrometheusSource(url="https://bob:hunter2@prom.example.org:9090"))
    assert "hunter2" not in str(err.value) and "bob" not in str(err.value)
    assert "username_env" in str(err.value)


def test_tls_verification_is_on_by_default() -> None:
    with PrometheusClient(PrometheusSource(url="https://prom.example.org")) as client:
        assert client.session.verify is True
        assert "Accept-Encoding" not in client.session.headers or (
            client.session.headers["Accept-Encoding"] != "identity"
        )
    with PrometheusClient(PrometheusSource(url="http://127.0.0.1:9090")) as client:
        assert client.session.headers["Accept-Encoding"] == "identity"
