"""What the `gpuwaste ingest SOURCE` subcommands share: their `--cluster` option, settings and run
options from the group's options, the cluster a one-off run (source given by flags) ingests into,
and how a subcommand runs (`run_subcommand`)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from gpuwaste.cli_common import settings
from gpuwaste.config import ClusterConfig, ConfigError, Settings, error_input, error_reason
from gpuwaste.errors import GpuwasteError
from gpuwaste.ingest.base import RunOptions, Source

ClusterName = Annotated[
    str | None,
    typer.Option(
        "--cluster",
        help="With an input flag: the cluster the data is from (needed). Without: only this "
        "configured cluster (default: every cluster configuring this source).",
    ),
]


def common(
    ctx: typer.Context,
    config: Path | None,
    data_dir: Path | None,
    quiet: bool,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
) -> tuple[Settings, RunOptions]:
    """Settings and run options: the subcommand's own options, else those of `gpuwaste ingest`."""
    obj: dict[str, Any] = ctx.obj or {}
    s = settings(config or obj.get("config"), data_dir or obj.get("data_dir"))
    return s, RunOptions(quiet=quiet or bool(obj.get("quiet")), since=since, until=until)


# The flag (or argument) that sets a field of a one-off cluster, where it is not `--field-name`.
FLAG_OF_FIELD = {
    "name": "--cluster",
    "scontrol_file": "--scontrol",
    "scrape_interval_s": "--scrape-interval",
    "dir": "the trace folder",
    "verify_tls": "--insecure",
    "enabled": "--kubernetes",
}


def flag_of(loc: tuple[int | str, ...]) -> str:
    """The command-line flag behind a pydantic error location such as ('prometheus', 'url')."""
    field = next((str(p) for p in reversed(loc) if isinstance(p, str)), "")
    return FLAG_OF_FIELD.get(field, "--" + field.replace("_", "-"))


def flag_problem(exc: ValidationError) -> str:
    """One sentence naming the first refused flag, its value and what it accepts."""
    errors = exc.errors()
    first = errors[0]
    reason = error_reason(first).replace("input should be", "it must be", 1)
    more = f" (and {len(errors) - 1} more problem(s))" if len(errors) > 1 else ""
    return f"{flag_of(tuple(first['loc']))} {error_input(first)} is not accepted: {reason}{more}."


def one_off_cluster(
    s: Settings, name: str | None, what: str, *, timezone: str | None = None, **source: Any
) -> ClusterConfig:
    """The cluster `name` with `source` (e.g. `slurm={...}`, a dict of the flags' values) set
    from flags. A configured cluster of that name keeps its other sources and time zone (they
    decide, e.g., where GPU indices come from); `timezone` overrides the zone. A refused value
    is a ConfigError naming its flag, the value and what the flag accepts."""
    if not name:
        raise GpuwasteError(f"{what} needs --cluster NAME to say which cluster the data is from.")
    known = [c for c in s.clusters if c.name == name]
    base: dict[str, Any] = {"name": name}
    if timezone or known:
        base["timezone"] = timezone or known[0].timezone
    try:
        one_off = ClusterConfig.model_validate({**base, **source})
    except ValidationError as exc:
        raise ConfigError(flag_problem(exc)) from None
    if not known:
        return one_off
    update = {k: getattr(one_off, k) for k in (*source, "timezone")}
    return known[0].model_copy(update=update)


def run_subcommand(
    s: Settings,
    options: RunOptions,
    source: Source,
    cluster: str | None,
    inputs: dict[str, Any] | None,
    *,
    what: str,
    timezone: str | None = None,
) -> None:
    """What every `gpuwaste ingest SOURCE` does. Without input flags (`inputs` None): the
    configured source of `cluster`, or of every cluster that has it. With them (`inputs`, the
    source's table as the flags give it): one-off into `cluster`, which `what` (the command as
    typed) then needs."""
    # here, not at the top: `gpuwaste` starts without the writer and the progress display
    from gpuwaste.ingest.run import run_configured, run_one

    if inputs is None:
        run_configured(s, [source], options, cluster=cluster)
        return
    tables = {source.config_key: inputs}
    run_one(s, one_off_cluster(s, cluster, what, timezone=timezone, **tables), source, options)
