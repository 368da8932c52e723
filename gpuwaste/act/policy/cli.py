"""`gpuwaste policy replay`: the command line of the replay."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

import typer

from gpuwaste.cli_common import ClusterOpt, ConfigOpt, DataDirOpt, FormatOpt, settings
from gpuwaste.errors import UsageError
from gpuwaste.render import OutputFormat, render
from gpuwaste.warehouse.results import ALL_VCS

policy_app = typer.Typer(
    help="Replay enforcement rules (cancel idle jobs, cap interactive ones) over history.",
    no_args_is_help=True,
    rich_markup_mode=None,  # plain help (gpuwaste/cli.py says why)
)


def period_time(flag: str, text: str | None, now: datetime) -> datetime | None:
    """`--since` / `--until` as `gpuwaste report` reads `--since` (24h, 7d, a date or time)."""
    from gpuwaste.analyses.period import since_time

    try:
        return since_time(text, now)
    except UsageError as exc:
        raise UsageError(str(exc).replace("--since", flag, 1)) from None


@policy_app.command()
def replay(
    idle_hours: Annotated[
        list[str],
        typer.Option(
            "--idle-hours",
            metavar="H[,H...]",
            help="Cancel a job once all its GPUs have been idle this many hours. Several values "
            "(comma-separated or repeated, e.g. 0.5,1,2,4) replay a sweep in one pass.",
        ),
    ],
    grace_minutes: Annotated[
        float, typer.Option("--grace-minutes", help="No cancel before start + this many minutes.")
    ] = 0.0,
    only: Annotated[
        str,
        typer.Option(
            "--only",
            help="Jobs replayed (the others are left out): debugging (declared or inferred), "
            "interactive (declared by the scheduler: debug partition, QoS, shell or Jupyter name) "
            "or all.",
        ),
    ] = "all",
    max_interactive_hours: Annotated[
        float | None,
        typer.Option(
            "--max-interactive-hours",
            help="Also cancel interactive jobs once they have run this many hours.",
        ),
    ] = None,
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
    cluster: ClusterOpt = None,
    since: Annotated[
        str | None,
        typer.Option(help="Jobs started since: 24h, 7d, 30d (before now) or a date/time."),
    ] = None,
    until: Annotated[
        str | None, typer.Option(help="Jobs started before: 24h, 7d (before now) or a date/time.")
    ] = None,
    jobs: Annotated[
        bool, typer.Option("--jobs", help="List the jobs each threshold cancels instead.")
    ] = False,
    count_looks_busy: Annotated[
        bool,
        typer.Option(
            "--count-looks-busy",
            help="Treat jobs that look busy (GPU_UTIL high, SM and tensor activity near zero) as "
            "idle over their whole allocation; their cancels say 'looks busy (counted idle)'.",
        ),
    ] = False,
    fmt: FormatOpt = OutputFormat.table,
) -> None:
    """Per threshold, per VC and in total: GPU hours reclaimed, jobs hit, wrongful hits (GPUs
    busy again after the cancel point) and the GPU hours of work they would have lost."""
    from gpuwaste.act.policy.replay import JOBS_KEY, KEY, jobs_counted, open_warehouse, title
    from gpuwaste.act.policy.replay import replay as run_replay
    from gpuwaste.act.policy.rule import make_rule
    from gpuwaste.analyses.report import jobs_line

    rule = make_rule(idle_hours, grace_minutes, only, max_interactive_hours)
    now = datetime.now(UTC)
    start, end = period_time("--since", since, now), period_time("--until", until, now)
    if start is not None and end is not None and start >= end:
        raise UsageError(f"--since {since} is not before --until {until}: the period is empty.")
    s = settings(config, data_dir)
    con = open_warehouse(s.data_dir, cluster)
    try:
        df = run_replay(
            con, rule, cluster=cluster, since=start, until=end, jobs=jobs,
            count_looks_busy=count_looks_busy,
        )  # fmt: skip
    finally:
        con.close()
    notes = []  # the list of jobs hit has no count to explain; CSV and JSON are for scripts
    if not jobs and fmt == OutputFormat.table and df.height > 0:
        period = start is not None or end is not None
        notes.append(jobs_line(s, jobs_counted(rule), cluster=cluster, period=period))
    render(
        df,
        fmt,
        title=title(rule),
        rollups={"vc": ALL_VCS},
        key=JOBS_KEY if jobs else KEY,
        notes=notes,
    )


def register(app: typer.Typer) -> None:
    """Add `gpuwaste policy` to the main app."""
    app.add_typer(policy_app, name="policy")


__all__ = ["period_time", "policy_app", "register"]
