"""Failure signature rules: the shipped set (`rules.toml`) and `[[failures.rules]]`, and the
match of a log's text against them. Pure: text in, the reason and its line out.

A log takes the reason of the first rule, in order, that matches any of its lines (the last such
line is kept: the one nearest the failure); rules marked `implicit` (a Python traceback, a bare
RuntimeError: symptoms, not causes) are tried only after every other rule failed, as the study
matched root causes before implicit signatures [Philly §4.2]. No match: no reason here (the
analysis calls such a failed attempt "no signature").
"""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources

from pydantic import ValidationError

from gpuwaste.config import ConfigError, FailureRule, FailureSettings, error_reason

MAX_LINE_CHARS = 500  # of the matched line kept in the warehouse


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


@cache
def shipped_rules() -> tuple[FailureRule, ...]:
    """The default rule set shipped with gpuwaste (gpuwaste/ingest/logs/rules.toml)."""
    text = resources.files("gpuwaste.ingest.logs").joinpath("rules.toml").read_text("utf-8")
    return tuple(_check(tomllib.loads(text).get("rules", []), "the shipped rules.toml"))


def rule_set(settings: FailureSettings) -> RuleSet:
    """The configured rules, then the shipped ones (unless `default_rules = false`), root
    causes before implicit rules, each kept in its order."""
    given = [*settings.rules, *(shipped_rules() if settings.default_rules else ())]
    ordered = tuple([r for r in given if not r.implicit] + [r for r in given if r.implicit])
    digest = hashlib.sha256(
        json.dumps([r.model_dump() for r in ordered], sort_keys=True).encode()
    ).hexdigest()[:16]
    return RuleSet(ordered, tuple(re.compile(r.regex, re.MULTILINE) for r in ordered), digest)


def match_text(text: str, rules: RuleSet) -> Match | None:
    """The first rule (in priority order) matching a line of `text`, with the last line it
    matches; None when no rule matches."""
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
