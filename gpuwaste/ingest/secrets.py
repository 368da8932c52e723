"""Credentials for a source, read from environment variables at the moment of use.

The configuration names the *variables* (`token_env`, `username_env`, `password_env`), never the
values, so a secret is never in a file, on a command line or in a log line. Error messages name
the variable, not its content.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping
from dataclasses import dataclass

from gpuwaste.config import PrometheusSource
from gpuwaste.errors import GpuwasteError


class MissingSecret(GpuwasteError):
    """A configured environment variable is not set."""


@dataclass(frozen=True)
class Credentials:
    headers: dict[str, str]
    basic: tuple[str, str] | None

    def __repr__(self) -> str:  # never print a secret, even by accident
        kinds = [k for k in self.headers] + (["basic"] if self.basic else [])
        return f"Credentials({', '.join(kinds) or 'none'})"

    def redact(self, text: str) -> str:
        """`text` (e.g. a server's error body, which may echo our headers) with secrets as ***."""
        secrets = [v.split(" ", 1)[-1] for v in self.headers.values()]
        if self.basic is not None:
            user, password = self.basic
            pair = f"{user}:{password}".encode("latin-1", errors="replace")
            secrets += [password, base64.b64encode(pair).decode()]
        for secret in sorted((s for s in secrets if s), key=len, reverse=True):
            text = text.replace(secret, "***")
        return text


def _read(name: str, what: str, env: Mapping[str, str]) -> str:
    value = env.get(name)
    if not value:
        raise MissingSecret(f"environment variable {name} ({what}) is not set or empty.")
    return value.strip()


def credentials(source: PrometheusSource, env: Mapping[str, str] | None = None) -> Credentials:
    """Bearer token (`token_env`) and/or basic auth (`username_env` + `password_env`)."""
    env = os.environ if env is None else env
    headers: dict[str, str] = {}
    basic: tuple[str, str] | None = None
    if source.token_env:
        headers["Authorization"] = f"Bearer {_read(source.token_env, 'the bearer token', env)}"
    if source.username_env or source.password_env:
        if not (source.username_env and source.password_env):
            raise MissingSecret(
                "basic auth needs both username_env and password_env in the configuration."
            )
        basic = (
            _read(source.username_env, "the basic-auth user", env),
            _read(source.password_env, "the basic-auth password", env),
        )
    return Credentials(headers, basic)
