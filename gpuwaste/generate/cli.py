"""`gpuwaste generate`: a plain function the CLI wires up (typer-compatible parameters)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from gpuwaste.generate.model import GeneratorSpec
from gpuwaste.generate.output import write_all


def parse_start(text: str) -> datetime:
    """ISO 8601; `Z` or an offset is honoured, a naive time is read as UTC."""
    t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return t if t.tzinfo is not None else t.replace(tzinfo=UTC)


def generate_command(
    out: Path,
    seed: int = 0,
    gpus: int = 32,
    days: float = 1.0,
    interval_s: int = 15,
    start: str | None = None,
    cluster: str = "demo",
    gzip: bool = False,
) -> None:
    """Generate a synthetic cluster in DIR: metrics.om, sacct.txt, philly/, truth.json."""
    spec = GeneratorSpec(seed=seed, gpus=gpus, days=days, interval_s=interval_s, cluster=cluster)
    if start is not None:
        spec = replace(spec, start=parse_start(start))
    write_all(spec, Path(out), gzip=gzip)
