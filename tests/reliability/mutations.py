"""Structure-aware mutations of real inputs, for fuzzing the parsers.

A mutation takes a real file (a fixture) and breaks it the way files break in the field: a line
dropped, duplicated or swapped, a field garbled, dropped or doubled, a number replaced by NaN, a
huge value or text, the delimiter changed, the text cut short anywhere. Each strategy yields the
mutated text; the parser under test must accept it row by row or refuse what it cannot read.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from hypothesis import strategies as st

from tests.conftest import FIXTURES, REPO

TESTS_DATA = REPO / "tests" / "data"

BAD_VALUES = [
    "",
    "NaN",
    "nan",
    "-NaN",
    "+Inf",
    "-Inf",
    "inf",
    "1e400",
    "-1e400",
    "-1",
    "-0",
    "0x1F",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775809",
    "18446744073709551616",
    "1" * 400,
    "3.4.5",
    "1,5",
    "None",
    "null",
    "N/A",
    "Unknown",
    "[]",
    "{}",
    '"',
    "\\",
    "\\u0000",
    "\x00",
    "\x1b[31m",
    "\u202e",
    "日本",
    "\ud7ff",
    "9999-12-31T23:59:59",
    "0000-00-00T00:00:00",
    "1970-01-01 00:00:00",
    "2017-11-05 01:30:00 PDT",
    "2026-03-29 02:30:00",
    "99999999999999",
    "-99999999999",
    "1.7976931348623157e308",
    "5e-324",
    "gpu:4(IDX:0-3)",
    "gpu:4(IDX:3-0)",
    "gpu[01-99999999]",
    "node[",
    "a,b,,c",
    "x" * 5000,
]

DELIMITERS = ["|", ",", " ", "=", ":", ";|;", "^|^", "\t", '"', "{", "}", "[", "]"]


@cache
def read_fixture(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def fixtures(*patterns: str) -> list[str]:
    """Texts of the real fixtures (tests/fixtures) and the project's test data matching the globs."""
    out: list[str] = []
    for pattern in patterns:
        for root in (FIXTURES, TESTS_DATA):
            out.extend(read_fixture(p) for p in sorted(root.glob(pattern)) if p.is_file())
    if not out:
        raise FileNotFoundError(f"no fixture matches {patterns}")
    return out


def _cap(text: str, max_lines: int) -> str:
    """Keep the first lines only: the parsers' per-example cost must stay tiny."""
    lines = text.split("\n")
    return "\n".join(lines[:max_lines]) if len(lines) > max_lines else text


# The strategies each draw uses, built once.
_OPS = st.sampled_from(
    [
        "garble",
        "garble",
        "garble",
        "drop_field",
        "dup_field",
        "drop_line",
        "dup_line",
        "swap_lines",
        "delimiter",
        "insert",
        "truncate",
        "crlf",
    ]
)
_DELIMITER = st.sampled_from(DELIMITERS)
_INSERTED = st.text(max_size=40)


@cache
def _values(extra_values: tuple[str, ...]) -> st.SearchStrategy[str]:
    """The values a garbled field takes: built once per set of extras, not once per example
    (building and validating a strategy cost more than drawing from it)."""
    return st.sampled_from([*BAD_VALUES, *extra_values]) | st.text(max_size=12)


@st.composite
def mutated(
    draw: st.DrawFn, texts: list[str], *, max_lines: int = 60, extra_values: tuple[str, ...] = ()
) -> str:
    """A real text broken by 1-5 field- and line-level mutations."""
    text = _cap(draw(st.sampled_from(texts)), max_lines)
    lines = text.split("\n")
    values = _values(extra_values)
    for _ in range(draw(st.integers(1, 5))):
        op = draw(_OPS)
        if not lines:
            lines = [""]
        i = draw(st.integers(0, len(lines) - 1))
        line = lines[i]
        if op in ("garble", "drop_field", "dup_field", "delimiter"):
            delim = draw(st.sampled_from([d for d in DELIMITERS if d in line] or [" "]))
            fields = line.split(delim)
            j = draw(st.integers(0, len(fields) - 1))
            if op == "garble":
                fields[j] = draw(values)
            elif op == "drop_field" and len(fields) > 1:
                del fields[j]
            elif op == "dup_field":
                fields.insert(j, fields[j])
            if op == "delimiter":
                lines[i] = draw(_DELIMITER).join(fields)
            else:
                lines[i] = delim.join(fields)
        elif op == "drop_line":
            del lines[i]
        elif op == "dup_line":
            lines.insert(i, line)
        elif op == "swap_lines":
            k = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[k] = lines[k], lines[i]
        elif op == "insert":
            lines.insert(i, draw(_INSERTED))
        elif op == "crlf":
            lines[i] = line + "\r"
        elif op == "truncate":
            joined = "\n".join(lines)
            cut = draw(st.integers(0, len(joined)))
            lines = joined[:cut].split("\n")
    return "\n".join(lines)


def line_texts(alphabet: str, *, max_lines: int = 12) -> st.SearchStrategy[str]:
    """Arbitrary text, biased to the characters that matter to a line-based format."""
    piece = st.text(alphabet=st.sampled_from(list(alphabet)) | st.characters(), max_size=40)
    return st.lists(piece, max_size=max_lines).map("\n".join) | st.text(max_size=200)
