"""The `gpuwaste` command: a thin layer over the library; each command calls one function.

Start-up is what every command pays (`gpuwaste job` answers within a second): the command modules
declare options and help only, and import what a command runs inside its function
(tests/test_cli_startup.py lists the packages `import gpuwaste.cli` must not load).

Operator mistakes (a wrong file, an unreachable server, a bad key) raise GpuwasteError and are
printed as one sentence on stderr with exit status 1, never as a traceback; a wrong command line
(a flag's value the flag never accepts, flags that do not go together: UsageError) exits with
status 2, as click's own refusals do.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from gpuwaste import __version__
from gpuwaste.act.cli import register as register_act
from gpuwaste.act.policy.cli import register as register_policy
from gpuwaste.analyses.cli import register as register_analyses
from gpuwaste.cli_common import ConfigOpt, DataDirOpt, FormatOpt, settings
from gpuwaste.config import DATA_DIR_ENV, DEFAULT_DATA_DIR
from gpuwaste.dashboard.cli import register as register_dashboard
from gpuwaste.dialects import NAMES as TELEMETRY_NAMES
from gpuwaste.errors import GpuwasteError, UsageError
from gpuwaste.exporter.cli import register as register_exporter
from gpuwaste.ingest.cli import ingest_app
from gpuwaste.render import OutputFormat, render

app = typer.Typer(
    name="gpuwaste",
    help="Where do our GPU hours go? Ingest GPU telemetry and scheduler records, analyze waste, "
    "and show it.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    # click's plain help: Rich would take a help's `[notify] since` (a section's name) for a
    # style tag and drop it, and would write a value type after flags (`--quiet <bool>`)
    rich_markup_mode=None,
)


def _print_version(value: bool) -> None:
    if value:
        print(f"gpuwaste {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version", is_eager=True, callback=_print_version, help="Print the version and stop."
        ),
    ] = False,
) -> None:
    """The options of `gpuwaste` itself, before a command."""


app.add_typer(ingest_app, name="ingest")
register_analyses(app)
register_dashboard(app)
register_exporter(app)
register_policy(app)
register_act(app)


@app.command()
def sql(
    query: Annotated[
        str, typer.Argument(help='One read-only query, e.g. "select count(*) from gpu_samples".')
    ],
    config: ConfigOpt = None,
    data_dir: DataDirOpt = None,
    fmt: FormatOpt = OutputFormat.table,
    memory_mib: Annotated[
        int | None,
        typer.Option(
            "--memory-mib",
            min=64,
            help="Memory the query may take, MiB (default: sql.memory_mib of the config, "
            "else 2048).",
        ),
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option(
            "--timeout",
            min=0.001,
            help="Seconds the query may run (default: sql.timeout_s of the config, else 300).",
        ),
    ] = None,
) -> None:
    """Run one read-only SQL query against the warehouse."""
    import duckdb

    from gpuwaste.warehouse.bounded import Bounds, query_frame

    s = settings(config, data_dir)
    if not s.data_dir.is_dir():
        raise GpuwasteError(
            f"no warehouse at {s.data_dir}: run `gpuwaste demo` or `gpuwaste ingest` first."
        )
    bounds = Bounds(
        memory_mib=s.sql.memory_mib if memory_mib is None else memory_mib,
        timeout_s=s.sql.timeout_s if timeout is None else timeout,
        memory_key="--memory-mib (or [sql] memory_mib in gpuwaste.toml)",
        time_key="--timeout (or [sql] timeout_s in gpuwaste.toml)",
    )
    try:
        df = query_frame(s.data_dir, query, bounds)
    except duckdb.Error as exc:
        raise GpuwasteError(f"query failed: {str(exc).strip()}") from None
    except KeyboardInterrupt:
        # click would print 'Aborted!' and exit 1; the query has stopped (bounded.waited)
        print("gpuwaste: query interrupted (Ctrl-C).", file=sys.stderr)
        raise typer.Exit(130) from None
    if df is not None:
        render(df, fmt, readable=False)  # the query's own column names


@app.command()
def generate(
    out: Annotated[Path, typer.Option("--out", help="Folder to write the cluster into.")],
    seed: Annotated[
        int, typer.Option(help="Random seed: the same seed gives identical files.")
    ] = 0,
    gpus: Annotated[int, typer.Option(help="Number of GPUs (8 per host).")] = 32,
    days: Annotated[float, typer.Option(help="Length of the window in days.")] = 1.0,
    interval_s: Annotated[
        int, typer.Option("--interval-s", help="Sampling interval, seconds.")
    ] = 15,
    start: Annotated[
        str | None, typer.Option(help="Window start, ISO 8601 (default 2026-10-31T12:00Z).")
    ] = None,
    cluster: Annotated[str, typer.Option(help="Cluster name.")] = "demo",
    gzip: Annotated[
        bool, typer.Option("--gzip", help="Write metrics.om.gz instead of metrics.om.")
    ] = False,
    policy_cases: Annotated[
        bool,
        typer.Option(
            "--policy-cases",
            help="Make every batch job of 4 h or more busy-then-idle or idle-then-busy (for "
            "replaying cancel rules; truth.json lists them under policy_cases).",
        ),
    ] = False,
    mig_hosts: Annotated[
        int,
        typer.Option(
            "--mig-hosts",
            help="Add this many MIG hosts (A100 80GB: one GPU split into mixed MIG profiles, one "
            "whole), with truth per slice in truth.json's 'mig'.",
        ),
    ] = 0,
    shared_gpus: Annotated[
        int,
        typer.Option(
            "--shared-gpus",
            help="Add this many hosts with one GPU time-sliced by two job streams, with each "
            "job's share in truth.json's 'mig'.",
        ),
    ] = 0,
    telemetry: Annotated[
        str,
        typer.Option(
            "--telemetry",
            help=f"The GPU exporter metrics.om is written in: {', '.join(TELEMETRY_NAMES)} (the "
            "same cluster and truth in each).",
        ),
    ] = "dcgm",
    no_job_labels: Annotated[
        bool,
        typer.Option(
            "--no-job-labels",
            help="Leave the job off the GPU series (DCGM's default, no hpc_job; older Jobstats: "
            "only its job gauge); writes the scontrol captures a 5-minute ingest "
            "would take (scontrol/*.txt) where nothing names the job.",
        ),
    ] = False,
    vc_quotas: Annotated[
        bool,
        typer.Option(
            "--vc-quotas",
            help="Give each VC a GPU quota the scheduler enforces, with the truth of every "
            "wait's causes and out-of-order starts in truth.json's 'queue' (its vc_quotas go in "
            "[clusters.vc_quotas]).",
        ),
    ] = False,
    logs: Annotated[
        bool,
        typer.Option(
            "--logs",
            help="Also write logs/: the jobs' stdout/stderr with planted failure errors, and "
            "each failed job's reason in truth.json's 'failure_logs'.",
        ),
    ] = False,
    busy_loops: Annotated[
        int,
        typer.Option(
            "--busy-loops",
            help="Make this many batch jobs of 30 min or more busy loops: GPU utilization 100 "
            "percent while SM activity is 1-2 percent and power near the memory-held power (the "
            "SM-activity series is then written where the exporter has one), listed in "
            "truth.json's 'busy_loops'.",
        ),
    ] = 0,
    requeues: Annotated[
        int,
        typer.Option(
            "--requeues",
            help="Make this many failed jobs' retry chains Slurm requeues: their runs printed "
            "under one JobID as `sacct --duplicates` prints them, listed in truth.json's "
            "'requeues'. Not with --vc-quotas or --telemetry jobstats.",
        ),
    ] = 0,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Remove an earlier generate's output from --out first (without it a folder "
            "that is not empty is refused).",
        ),
    ] = False,
) -> None:
    """Write a synthetic multi-tenant cluster in the sources' own formats, with its planted truth."""
    from gpuwaste.generate.cli import generate_command

    generate_command(
        out,
        seed,
        gpus,
        days,
        interval_s,
        start,
        cluster,
        gzip,
        policy_cases,
        mig_hosts,
        shared_gpus,
        telemetry,
        no_job_labels,
        vc_quotas,
        logs,
        busy_loops,
        requeues,
        force,
    )


DemoDataDirOpt = Annotated[
    Path,
    typer.Option(
        "--data-dir",
        help=f"Folder for the demo's warehouse. The demo reads neither the configuration nor "
        f"${DATA_DIR_ENV}, so the sample never lands in a configured warehouse.",
    ),
]


@app.command()
def demo(
    data_dir: DemoDataDirOpt = DEFAULT_DATA_DIR,
    no_serve: Annotated[bool, typer.Option("--no-serve", help="Stop after the summary.")] = False,
    port: Annotated[int, typer.Option(envvar="PORT", help="Dashboard port.")] = 8501,
    host: Annotated[str, typer.Option(help="Dashboard address.")] = "127.0.0.1",
) -> None:
    """Bundled sample -> warehouse -> analyses -> summary -> dashboard on localhost."""
    from gpuwaste.demo import run_demo

    run_demo(data_dir, serve=not no_serve, port=port, host=host)


USAGE_ERROR = 2  # click's exit status for a usage error


def main() -> None:
    try:
        app()
    except UsageError as exc:
        print(f"gpuwaste: {exc}", file=sys.stderr)
        sys.exit(USAGE_ERROR)
    except GpuwasteError as exc:
        print(f"gpuwaste: {exc}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:
        print("gpuwaste: interrupted.", file=sys.stderr)
        sys.exit(130)
