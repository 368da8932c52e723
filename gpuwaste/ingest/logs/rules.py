r"""Failure signature rules: the shipped set (`rules.toml`) and `[[failures.rules]]`, and the
match of a log's text against them. Pure: text in, the reason and its line out.

A log takes the reason of the first rule, in order, that matches any of its lines (the last such
line is kept: the one nearest the failure); rules marked `implicit` (a Python traceback, a bare
RuntimeError: symptoms, not causes) are tried only after every other rule failed, as the study
matched root causes before implicit signatures [Philly §4.2]. No match: no reason here (the
analysis calls such a failed attempt "no signature").

Python's `re` has no timeout, so a rule is guarded two ways (docs/ingest-files.md#job-logs): a
regex with a quantifier inside a repeated group (`(a+)+`, `(\s*x?)*`: the nested quantifiers
that backtrack exponentially) is refused when the rules are loaded, naming the rule (a
possessive `a++` or atomic `(?>a+)` inner part is accepted: it cannot backtrack); and lines are
cut at `MATCH_LINE_CHARS` before matching, which bounds the polynomial backtracking of
quantifiers in a row (`.*x.*y`) by the line's length. Neither makes every regex cheap.
"""

from __future__ import annotations

import hashlib
import json
import re
import re._constants as sre  # type: ignore[import-not-found]  # a regex's parsed form
import re._parser as sre_parse  # type: ignore[import-not-found]
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from pydantic import ValidationError

from gpuwaste.config import ConfigError, FailureRule, FailureSettings, error_reason

MAX_LINE_CHARS = 500  # of the matched line kept in the warehouse
MATCH_LINE_CHARS = 1024  # a longer line is matched on its first characters only


@dataclass(frozen=True)
class Match:
    reason: str
    sources: tuple[str, ...]
    implicit: bool
    rank: int  # the rule's place in the order (root causes first)
    line_no: int  # 1-based, in the text matched
    line: str


@dataclass(frozen=True)
class RuleSet:
    rules: tuple[FailureRule, ...]  # in priority order: root causes, then implicit ones
    compiled: tuple[re.Pattern[str], ...]
    digest: str  # changes when any rule does: a log read with other rules is read again


def _check(raw: list[object], where: str) -> list[FailureRule]:
    """Validated rules; a bad one refused in one sentence naming it (its place and reason)."""
    out = []
    for i, item in enumerate(raw):
        try:
            out.append(FailureRule.model_validate(item))
        except ValidationError as exc:
            err = exc.errors()[0]
            name = item.get("reason", "?") if isinstance(item, dict) else "?"
            raise ConfigError(
                f"{where}: rule {i + 1} ('{name}') is refused: {error_reason(err)}."
            ) from None
    return out


def _nested_quantifier(items: Any, repeated: bool = False) -> bool:
    """Whether a parsed regex (`re._parser`) holds a backtracking quantifier that may repeat
    more than once inside another one. An atomic group or a possessive quantifier starts afresh:
    once matched it is never re-entered, so what it holds is judged on its own."""
    for op, av in items:
        if op in (sre.MAX_REPEAT, sre.MIN_REPEAT):
            many = av[1] > 1
            if (many and repeated) or _nested_quantifier(av[2], repeated or many):
                return True
            continue
        if op is sre.POSSESSIVE_REPEAT:
            subs, inside = [av[2]], False
        elif op is sre.ATOMIC_GROUP:
            subs, inside = [av], False
        elif op is sre.SUBPATTERN:
            subs, inside = [av[3]], repeated
        elif op is sre.BRANCH:
            subs, inside = av[1], repeated
        elif op in (sre.ASSERT, sre.ASSERT_NOT):
            subs, inside = [av[1]], repeated
        elif op is sre.GROUPREF_EXISTS:
            subs, inside = [b for b in av[1:] if b is not None], repeated
        else:
            continue
        if any(_nested_quantifier(sub, inside) for sub in subs):
            return True
    return False


def refuse_backtracking(rules: tuple[FailureRule, ...], where: str) -> None:
    """ConfigError naming the first rule whose regex nests quantifiers (catastrophic
    backtracking: `(a+)+$` on a line of a's takes longer than the age of the universe)."""
    for i, rule in enumerate(rules):
        if _nested_quantifier(sre_parse.parse(rule.regex)):
            raise ConfigError(
                f"{where}: rule {i + 1} ('{rule.reason}') is refused: its regex "
                f"{rule.regex!r} repeats a quantifier inside a repeated group, which can "
                "backtrack for ever on one long line; write the inner part possessive "
                "(`a++`) or atomic (`(?>a+)`), or without the nesting."
            )


@cache
def shipped_rules() -> tuple[FailureRule, ...]:
    """The default rule set shipped with gpuwaste (gpuwaste/ingest/logs/rules.toml)."""
    text = resources.files("gpuwaste.ingest.logs").joinpath("rules.toml").read_text("utf-8")
    rules = tuple(_check(tomllib.loads(text).get("rules", []), "the shipped rules.toml"))
    refuse_backtracking(rules, "the shipped rules.toml")
    return rules


def cut_long_lines(text: str, limit: int = MATCH_LINE_CHARS) -> str:
    """`text` with every line longer than `limit` characters cut to its first `limit` (the
    line count unchanged, so line numbers still hold)."""
    lines = text.split("\n")
    if all(len(line) <= limit for line in lines):
        return text
    return "\n".join(line[:limit] for line in lines)


def rule_set(settings: FailureSettings) -> RuleSet:
    """The configured rules, then the shipped ones (unless `default_rules = false`), root
    causes before implicit rules, each kept in its order."""
    refuse_backtracking(tuple(settings.rules), "[[failures.rules]]")
    given = [*settings.rules, *(shipped_rules() if settings.default_rules else ())]
    ordered = tuple([r for r in given if not r.implicit] + [r for r in given if r.implicit])
    digest = hashlib.sha256(
        json.dumps([r.model_dump() for r in ordered], sort_keys=True).encode()
    ).hexdigest()[:16]
    return RuleSet(ordered, tuple(re.compile(r.regex, re.MULTILINE) for r in ordered), digest)


def match_text(text: str, rules: RuleSet) -> Match | None:
    """The first rule (in priority order) matching a line of `text`, with the last line it
    matches; None when no rule matches. Lines are matched on their first `MATCH_LINE_CHARS`."""
    text = cut_long_lines(text)
    for rank, (rule, pattern) in enumerate(zip(rules.rules, rules.compiled, strict=True)):
        last = None
        for last in pattern.finditer(text):  # noqa: B007 (the last match is kept)
            pass
        if last is None:
            continue
        start = text.rfind("\n", 0, last.start()) + 1
        end = text.find("\n", last.start())
        line = text[start : end if end >= 0 else len(text)].rstrip("\r")
        return Match(
            reason=rule.reason,
            sources=tuple(rule.sources),
            implicit=rule.implicit,
            rank=rank,
            line_no=text.count("\n", 0, start) + 1,
            line=line[:MAX_LINE_CHARS],
        )
    return None
