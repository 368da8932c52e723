"""`gpuwaste ingest prometheus | openmetrics`: GPU and host telemetry.

With `--url` (or `--file`) and `--cluster NAME`, a subcommand runs one-off without a configuration
file; without, it runs the configured source of `--cluster NAME`, or of every cluster that has
one. Credentials are
never flags: `--token-env NAME` names the environment variable that holds a bearer token.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpuwaste.cli_common import ConfigOpt, DataDirOpt, QuietOpt
from gpuwaste.dialects import NAMES, dialect
from gpuwaste.errors import GpuwasteError
from gpuwaste.ingest.cli_options import ClusterName, common, run_subcommand

if TYPE_CHECKING:
    from gpuwaste.ingest.base import RunOptions, Source


def parse_when(text: str | None, flag: str) -> datetime | None:
    """ISO 8601 date or time; without a zone it is UTC."""
    if text is None:
        return None
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise GpuwasteError(
            f"{flag} {text!r} is not an ISO 8601 time such as 2026-11-01 or 2026-11-01T12:00Z."
        ) from None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


TelemetryOpt = Annotated[
    str | None,
    typer.Option(
        "--telemetry",
        help=f"GPU telemetry dialect: {', '.join(NAMES)} (default: the cluster's `telemetry`, "
        "else recognised from the series present).",
    ),
]


def with_telemetry(options: RunOptions, telemetry: str | None) -> RunOptions:
    """The run's options with `--telemetry`; a name that is no dialect is one sentence listing
    those accepted."""
    if telemetry is None:
        return options
    try:
        dialect(telemetry)
    except ValueError as exc:
        raise GpuwasteError(f"--telemetry: {exc}.") from None
    return replace(options, telemetry=telemetry)


def register_prometheus(app: typer.Typer, source: Source) -> None:
    """Add `prometheus` to the `ingest` app."""

    @app.command(source.name)
    def prometheus_cmd(
        ctx: typer.Context,
        url: Annotated[
            str | None,
            typer.Option("--url", help="Prometheus (or Thanos/Mimir/VictoriaMetrics) base URL."),
        ] = None,
        cluster: ClusterName = None,
        since: Annotated[
            str | None,
            typer.Option("--since", help="First run starts here (ISO 8601; default 7 days ago)."),
        ] = None,
        until: Annotated[
            str | None, typer.Option("--until", help="Stop here (ISO 8601; default: now - 60 s).")
        ] = None,
        label_filter: Annotated[
            str, typer.Option("--label-filter", help='Extra PromQL matchers, e.g. {cluster="a"}.')
        ] = "",
        scrape_interval: Annotated[
            float,
            typer.Option("--scrape-interval", help="Scrape interval of the DCGM exporter, s."),
        ] = 15.0,
        token_env: Annotated[
            str | None,
            typer.Option(
                "--token-env", help="Name of the environment variable with a bearer token."
            ),
        ] = None,
        kubernetes: Annotated[
            bool,
            typer.Option("--kubernetes", help="Also read pods from kube-state-metrics as jobs."),
        ] = False,
        telemetry: TelemetryOpt = None,
        insecure: Annotated[
            bool, typer.Option("--insecure", help="Do not verify the server's TLS certificate.")
        ] = False,
        config: ConfigOpt = None,
        data_dir: DataDirOpt = None,
        quiet: QuietOpt = False,
    ) -> None:
        """DCGM GPU series, node-exporter host series and (optionally) Kubernetes pods."""
        window = {"since": parse_when(since, "--since"), "until": parse_when(until, "--until")}
        s, options = common(ctx, config, data_dir, quiet, **window)
        options = with_telemetry(options, telemetry)
        inputs: dict[str, Any] | None = None
        if url is not None:
            inputs = {
                "url": url,
                "label_filter": label_filter,
                "scrape_interval_s": scrape_interval,
                "verify_tls": not insecure,
                "kubernetes": {"enabled": kubernetes},
            }
            if token_env:
                inputs["token_env"] = token_env
        what = "gpuwaste ingest prometheus --url"
        run_subcommand(s, options, source, cluster, inputs, what=what)


def register_openmetrics(app: typer.Typer, source: Source) -> None:
    """Add `openmetrics` to the `ingest` app."""

    @app.command(source.name)
    def openmetrics_cmd(
        ctx: typer.Context,
        file: Annotated[
            Path | None,
            typer.Option("--file", help="OpenMetrics / Prometheus text file (.om, .om.gz, .prom)."),
        ] = None,
        cluster: ClusterName = None,
        telemetry: TelemetryOpt = None,
        host: Annotated[
            str | None,
            typer.Option(
                "--host",
                help="Host of the series without a host label (one host's /metrics saved to "
                "a file has no `instance`).",
            ),
        ] = None,
        config: ConfigOpt = None,
        data_dir: DataDirOpt = None,
        quiet: QuietOpt = False,
    ) -> None:
        """Saved GPU (DCGM or another dialect) / node-exporter samples from a file, with no
        server (the demo's path)."""
        s, options = common(ctx, config, data_dir, quiet)
        options = with_telemetry(options, telemetry)
        inputs: dict[str, Any] | None = None
        if file is not None:
            inputs = {"file": file, **({"host": host} if host else {})}
        elif host is not None:
            raise GpuwasteError("--host is given with --file (the scrape it names the host of).")
        what = "gpuwaste ingest openmetrics --file"
        run_subcommand(s, options, source, cluster, inputs, what=what)
