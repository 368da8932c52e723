"""Untrusted text from the data is shown as text in the terminal, never interpreted."""

from __future__ import annotations

import io

import polars as pl
from hypothesis import given
from hypothesis import strategies as st

from gpuwaste.render import OutputFormat, render
from gpuwaste.text import printable
from tests.reliability.fuzzing import fuzz_settings

HOSTILE = [
    "[bold red]pwned[/bold red]",
    "<script>alert(1)</script>",
    "\x1b[2J\x1b[Hcleared",
    "evil\nforged line",
    "right\u202eto-left",
    "bell\x07",
]


def test_hostile_names_print_literally() -> None:
    df = pl.DataFrame({"user": HOSTILE, "job": list(range(len(HOSTILE)))})
    out = io.StringIO()
    render(df, OutputFormat.table, out=out)
    text = out.getvalue()
    assert "[bold red]pwned[/bold red]" in text  # markup shown, not applied
    assert "<script>alert(1)</script>" in text
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert "\\x1b[2J" in text and "evil\\nforged line" in text and "\\u202e" in text


@fuzz_settings
@given(st.text())
def test_printable_is_one_inert_line(s: str) -> None:
    p = printable(s)
    assert "\n" not in p and "\r" not in p and "\x1b" not in p
    assert all(not (0x7F <= ord(c) <= 0x9F) and ord(c) >= 0x20 for c in p)
