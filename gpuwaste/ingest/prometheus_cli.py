"""`gpuwaste ingest prometheus | openmetrics`: GPU and host telemetry.

With `--url` (or `--file`) and `--cluster`, a subcommand runs one-off without a configuration
file; with neither, it runs that source for every cluster that configures it. Credentials are
never flags: `--token-env NAME` names the environment variable that holds a bearer token.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from gpuwaste.cli_common import ConfigOpt, DataDirOpt, QuietOpt
from gpuwaste.errors import GpuwasteError
from gpuwaste.ingest.cli_options import ClusterName, common, one_off_cluster
from gpuwaste.ingest.run import run_configured, run_one


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


def register(app: typer.Typer) -> None:
    """Add this family's subcommands to the `ingest` app."""

    @app.command("prometheus")
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
        insecure: Annotated[
            bool, typer.Option("--insecure", help="Do not verify the server's TLS certificate.")
        ] = False,
        config: ConfigOpt = None,
        data_dir: DataDirOpt = None,
        quiet: QuietOpt = False,
    ) -> None:
        """DCGM GPU series, node-exporter host series and (optionally) Kubernetes pods."""
        from gpuwaste.ingest.prometheus_runners import ONE_OFF_WINDOW

        s, q = common(ctx, config, data_dir, quiet)
        window = (parse_when(since, "--since"), parse_when(until, "--until"))
        if url is None:
            if cluster is not None:
                selected = s.cluster(cluster)
                if selected.prometheus is None:
                    raise GpuwasteError(f"cluster {cluster} has no [prometheus] source configured.")
                token = ONE_OFF_WINDOW.set(window)
                try:
                    run_one(s, selected, "prometheus", q)
                finally:
                    ONE_OFF_WINDOW.reset(token)
                return
            token = ONE_OFF_WINDOW.set(window)
            try:
                run_configured(s, ["prometheus"], q)
            finally:
                ONE_OFF_WINDOW.reset(token)
            return
        source: dict[str, Any] = {
            "url": url,
            "label_filter": label_filter,
            "scrape_interval_s": scrape_interval,
            "verify_tls": not insecure,
            "kubernetes": {"enabled": kubernetes},
        }
        if token_env:
            source["token_env"] = token_env
        c = one_off_cluster(s, cluster, "gpuwaste ingest prometheus --url", prometheus=source)
        token = ONE_OFF_WINDOW.set(window)
        try:
            run_one(s, c, "prometheus", q)
        finally:
            ONE_OFF_WINDOW.reset(token)

    @app.command("openmetrics")
    def openmetrics_cmd(
        ctx: typer.Context,
        file: Annotated[
            Path | None,
            typer.Option("--file", help="OpenMetrics / Prometheus text file (.om, .om.gz, .prom)."),
        ] = None,
        cluster: ClusterName = None,
        config: ConfigOpt = None,
        data_dir: DataDirOpt = None,
        quiet: QuietOpt = False,
    ) -> None:
        """Saved DCGM / node-exporter samples from a file, with no server (the demo's path)."""
        s, q = common(ctx, config, data_dir, quiet)
        if file is None:
            if cluster is not None:
                selected = s.cluster(cluster)
                if selected.openmetrics is None:
                    raise GpuwasteError(f"cluster {cluster} has no [openmetrics] file configured.")
                run_one(s, selected, "openmetrics", q)
            else:
                run_configured(s, ["openmetrics"], q)
            return
        c = one_off_cluster(
            s, cluster, "gpuwaste ingest openmetrics --file", openmetrics={"file": file}
        )
        run_one(s, c, "openmetrics", q)
