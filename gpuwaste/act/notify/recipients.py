"""Who gets a digest: a user's address (an address file, else a template), opt-outs, VC owners.

User names come from the data and are untrusted: an address made from one is used only when it
is a plain `local@domain` (no spaces, quotes, angle brackets, commas or control characters), so
a name cannot add recipients or headers to a message.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

from gpuwaste.config import ConfigError
from gpuwaste.text import printable

ADDRESS = re.compile(r"[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]+@[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?")
PLACEHOLDER = "{user}"


def valid_address(text: str) -> bool:
    return ADDRESS.fullmatch(text) is not None


def check_template(template: str) -> str:
    """An address template holds `{user}` once and no other braces."""
    rest = template.replace(PLACEHOLDER, "")
    if template.count(PLACEHOLDER) != 1 or "{" in rest or "}" in rest:
        raise ConfigError(
            f"address template '{printable(template)}' must contain {PLACEHOLDER} once and no "
            "other braces (e.g. {user}@example.org)."
        )
    if not valid_address(template.replace(PLACEHOLDER, "user")):
        raise ConfigError(
            f"address template '{printable(template)}' does not give an address like "
            "user@example.org."
        )
    return template


def load_address_book(path: Path) -> dict[str, str]:
    """A CSV file with a header `user,address`: user -> address."""
    try:
        with path.open(encoding="utf-8", newline="") as fh:
            rows = list(csv.DictReader(fh))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ConfigError(f"cannot read the address file {path}: {exc}.") from None
    book: dict[str, str] = {}
    for n, row in enumerate(rows, start=2):
        user, address = (row.get("user") or "").strip(), (row.get("address") or "").strip()
        if not user or not valid_address(address):
            raise ConfigError(
                f"{path}, line {n}: expected columns user,address with an address like "
                f"user@example.org, got '{printable(address)}'."
            )
        book[user] = address
    return book


def address_of(user: str, book: dict[str, str], template: str | None) -> str | None:
    """The user's address: from the address file, else from the template; None if neither
    gives a valid one."""
    if user in book:
        return book[user]
    if template is None:
        return None
    address = template.replace(PLACEHOLDER, user)
    return address if valid_address(address) else None


def opted_out(user: str, address: str | None, opt_out: list[str]) -> bool:
    return user in opt_out or (address is not None and address in opt_out)


def vc_owner_addresses(vc: str, owners: dict[str, list[str]]) -> list[str]:
    """The owners' addresses of a VC; an invalid one is a configuration error."""
    out = []
    for address in owners.get(vc, []):
        if not valid_address(address):
            raise ConfigError(
                f"[notify] vc_owners: '{printable(address)}' (VC {printable(vc)}) is not an "
                "address like owner@example.org."
            )
        out.append(address)
    return out


__all__ = [
    "address_of",
    "check_template",
    "load_address_book",
    "opted_out",
    "valid_address",
    "vc_owner_addresses",
]
