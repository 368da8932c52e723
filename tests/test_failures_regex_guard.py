"""The guards on user failure rules (`[[failures.rules]]`): Python's `re` has no timeout, so a
regex with nested quantifiers is refused naming its rule, and lines are cut before matching.
Hand-built cases; each finishes in milliseconds (a refused regex is never run)."""

from __future__ import annotations

import time

import pytest

from gpuwaste.config import ConfigError, FailureSettings, parse_settings
from gpuwaste.ingest.logs.rules import MATCH_LINE_CHARS, cut_long_lines, match_text, rule_set


def _rules(*rules: dict[str, object], default_rules: bool = True) -> FailureSettings:
    failures = {"rules": list(rules), "default_rules": default_rules}
    return parse_settings({"failures": failures}).failures


@pytest.mark.parametrize("evil", [r"(a+)+$", r"^(\s*x?)*$", r"(?:\w+\.)*done", r"(?=(a|b+)+)c"])
def test_a_nested_quantifier_is_refused_naming_the_rule(evil: str) -> None:
    settings = _rules({"regex": "fine", "reason": "ok"}, {"regex": evil, "reason": "evil rule"})
    with pytest.raises(ConfigError) as err:
        rule_set(settings)
    msg = str(err.value)
    assert "[[failures.rules]]: rule 2 ('evil rule')" in msg and repr(evil) in msg
    assert "possessive" in msg and "\n" not in msg


@pytest.mark.parametrize("safe", [r"(a++)+$", r"(?>a+)+$", r"(\w++\.)*done", r"(ab)?c+", r"a+b*"])
def test_possessive_and_atomic_inner_parts_are_accepted_and_run_fast(safe: str) -> None:
    rules = rule_set(_rules({"regex": safe, "reason": "r"}, default_rules=False))
    line = "a" * 200_000 + "!"  # (a+)+$ on this line would not end in our lifetime
    began = time.perf_counter()
    match_text(line, rules)
    assert time.perf_counter() - began < 2.0


def test_the_shipped_rules_have_no_nested_quantifier() -> None:
    rule_set(FailureSettings())  # raises naming the shipped rule otherwise


def test_long_lines_are_matched_on_their_first_characters() -> None:
    pad = "x" * (MATCH_LINE_CHARS - 40)
    text = f"start\n{pad} CUDA out of memory. Tried\n{'y' * MATCH_LINE_CHARS}CUDA out of memory\n"
    assert cut_long_lines(text).count("\n") == text.count("\n")
    found = match_text(text, rule_set(FailureSettings()))
    assert found is not None and found.reason == "GPU OOM" and found.line_no == 2
    # past the cut, the signature is not seen: the cost of the guard, said in the docs
    late = f"{'y' * MATCH_LINE_CHARS}CUDA out of memory\n"
    assert match_text(late, rule_set(FailureSettings())) is None


def test_a_quadratic_rule_on_a_megabyte_line_is_bounded_by_the_cut() -> None:
    rules = rule_set(_rules({"regex": r".*x.*y", "reason": "r"}, default_rules=False))
    line = " " * (1 << 20)  # uncut: ~10^12 steps; cut: ~10^6
    began = time.perf_counter()
    assert match_text(line, rules) is None
    assert time.perf_counter() - began < 2.0
