"""bench/harness/components.py: a missing component fails the test under CI and skips it
elsewhere, never silently passes."""

from __future__ import annotations

import pytest
from harness.components import require, require_module


def test_a_missing_module_skips_outside_ci_and_fails_under_ci(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CI", "false")
    with pytest.raises(pytest.skip.Exception, match="no_such_module_x is missing"):
        require_module("no_such_module_x", "no_such_module_x is missing")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="no_such_module_x is missing"):
        require_module("no_such_module_x", "no_such_module_x is missing")
    with pytest.raises(pytest.fail.Exception, match="no-such-binary-x is not installed"):
        require("no-such-binary-x")


def test_a_present_module_is_returned() -> None:
    assert require_module("json", "json is missing").dumps([1]) == "[1]"
