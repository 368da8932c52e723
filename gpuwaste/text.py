"""Untrusted text made printable: control and bidi characters become visible escapes."""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def printable(text: str) -> str:
    """`text` with every control character as `\\n`, `\\xNN` or `\\uNNNN`: one line, inert."""

    def esc(m: re.Match[str]) -> str:
        ch = m.group(0)
        if ch in _NAMED:
            return _NAMED[ch]
        c = ord(ch)
        return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"

    return _CONTROL.sub(esc, text)
