"""What the `gpuwaste ingest SOURCE` subcommands share: settings from the group's options, and the
cluster a one-off run (source given by flags) ingests into."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from gpuwaste.cli_common import settings
from gpuwaste.config import ClusterConfig, ConfigError, Settings
from gpuwaste.errors import GpuwasteError

ClusterName = Annotated[
    str | None, typer.Option("--cluster", help="Cluster name (needed with an input flag).")
]


def common(
    ctx: typer.Context, config: Path | None, data_dir: Path | None, quiet: bool
) -> tuple[Settings, bool]:
    """Settings and quietness: the subcommand's own options, else those of `gpuwaste ingest`."""
    obj: dict[str, Any] = ctx.obj or {}
    s = settings(config or obj.get("config"), data_dir or obj.get("data_dir"))
    return s, quiet or bool(obj.get("quiet"))


def one_off_cluster(
    s: Settings, name: str | None, what: str, *, timezone: str | None = None, **source: Any
) -> ClusterConfig:
    """The cluster `name` with `source` (e.g. `slurm={...}`) set from flags. A configured cluster
    of that name keeps its other sources and time zone (they decide, e.g., where GPU indices
    come from); `timezone` overrides the zone."""
    if not name:
        raise GpuwasteError(f"{what} needs --cluster NAME to say which cluster the data is from.")
    known = [c for c in s.clusters if c.name == name]
    base: dict[str, Any] = {"name": name}
    if timezone or known:
        base["timezone"] = timezone or known[0].timezone
    try:
        one_off = ClusterConfig.model_validate({**base, **source})
    except Exception as exc:  # pydantic ValidationError -> one sentence
        raise ConfigError(
            f"{what}: invalid option ({str(exc).splitlines()[-1].strip()})."
        ) from None
    if not known:
        return one_off
    update = {k: getattr(one_off, k) for k in (*source, "timezone")}
    return known[0].model_copy(update=update)
