"""The repository stands alone: every citation of a definition resolves in docs/definitions.md,
every analysis cites one, and nothing names a path outside the repository."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from gpuwaste.analyses.registry import ANALYSES

REPO = Path(__file__).resolve().parent.parent
DEFINITIONS = REPO / "docs" / "definitions.md"
CITATION = re.compile(r"definitions\.md#([a-z0-9-]+)")


def _slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors() -> set[str]:
    return {
        _slug(line.lstrip("#"))
        for line in DEFINITIONS.read_text().splitlines()
        if line.startswith("#")
    }


def _tracked_text_files() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    files = [REPO / f for f in out.splitlines()]
    return [
        f
        for f in files
        if f.suffix in {".py", ".sql", ".md", ".toml", ".yaml", ".cron", ".service", ".timer"}
        or f.name == "Makefile"
    ]


def test_every_citation_names_a_heading_of_the_definitions() -> None:
    anchors = _anchors()
    assert {"idle-slots", "gpu-utilization", "waste-by-vc"} <= anchors
    cited: dict[str, list[str]] = {}
    for f in _tracked_text_files():
        if not f.exists() or f == Path(__file__):  # this file's messages name the pattern
            continue
        for anchor in CITATION.findall(f.read_text(errors="replace")):
            cited.setdefault(anchor, []).append(str(f.relative_to(REPO)))
    assert len(cited) >= 15
    unknown = {a: files for a, files in cited.items() if a not in anchors}
    assert not unknown, f"citations of headings docs/definitions.md does not have: {unknown}"


def test_every_analysis_cites_its_definition() -> None:
    anchors = _anchors()
    for a in ANALYSES:
        found = CITATION.findall(a.definition)
        assert found, f"{a.name}: its definition cites no docs/definitions.md#heading"
        assert set(found) <= anchors, (a.name, found)


def test_nothing_names_a_path_outside_the_repository() -> None:
    outside = re.compile(r"\.\./shared|/work/shared|\.\./\.\./shared")
    hits = [
        str(f.relative_to(REPO))
        for f in _tracked_text_files()
        if f.exists() and f != Path(__file__) and outside.search(f.read_text(errors="replace"))
    ]
    assert not hits, f"paths outside the repository in: {hits}"
