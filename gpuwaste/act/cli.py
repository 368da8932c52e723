"""`gpuwaste job` and `gpuwaste notify`: acting on what the analyses found."""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from typing import Annotated

import typer

from gpuwaste.cli_common import ClusterOpt, ConfigOpt, DataDirOpt, settings

UNKNOWN_JOB_EXIT = 2


class JobFormat(StrEnum):
    table = "table"
    json = "json"


def register(app: typer.Typer) -> None:
    """Add `job` and `notify` to the main app."""

    @app.command()
    def job(
        job_id: Annotated[str, typer.Argument(help="The job's id, as the scheduler gives it.")],
        config: ConfigOpt = None,
        data_dir: DataDirOpt = None,
        cluster: ClusterOpt = None,
        fmt: Annotated[
            JobFormat, typer.Option("--format", help="table (terminal) or json.")
        ] = JobFormat.table,
    ) -> None:
        """One job: its figures, each GPU, a utilization strip, diagnoses with advice."""
        from gpuwaste.act.job_report import UnknownJob, as_dict, gather, render_text
        from gpuwaste.act.money import shown_currency
        from gpuwaste.render import _json_default

        s = settings(config, data_dir)
        try:
            url, currency = s.notify.dashboard_url, shown_currency(s.cost)
            data = gather(s.data_dir, job_id, cluster, url, currency)
        except UnknownJob as exc:
            print(f"gpuwaste: {exc}", file=sys.stderr)
            raise typer.Exit(UNKNOWN_JOB_EXIT) from None
        if fmt == JobFormat.json:
            json.dump(as_dict(data), sys.stdout, default=_json_default, indent=1)
            sys.stdout.write("\n")
        else:
            sys.stdout.write(render_text(data))

    @app.command()
    def notify(
        config: ConfigOpt = None,
        data_dir: DataDirOpt = None,
        cluster: ClusterOpt = None,
        since: Annotated[
            str | None,
            typer.Option(
                help="Window length before --until (7d, 24h) or a date/time. Default: "
                "[notify] since, 7d."
            ),
        ] = None,
        until: Annotated[
            str | None,
            typer.Option(help="Window end, a date/time (default: today 00:00 UTC)."),
        ] = None,
        smtp: Annotated[
            str | None,
            typer.Option(help="smtp://[USER@]HOST:PORT (STARTTLS when the server offers it)."),
        ] = None,
        smtp_password_env: Annotated[
            str | None,
            typer.Option(help="Name of the environment variable holding the SMTP password."),
        ] = None,
        sender: Annotated[str | None, typer.Option(help="From: address.")] = None,
        address_template: Annotated[
            str | None, typer.Option(help="A user's address, e.g. {user}@example.org.")
        ] = None,
        webhook: Annotated[
            str | None,
            typer.Option(help='Slack/Mattermost incoming webhook URL (JSON {"text": ...}).'),
        ] = None,
        dashboard_url: Annotated[
            str | None,
            typer.Option(
                "--dashboard-url",
                help="The dashboard's address as the readers reach it, the base of the job links "
                "(default: [notify] dashboard_url; --send refuses a loopback one).",
            ),
        ] = None,
        send: Annotated[
            bool, typer.Option("--send", help="Send. Without it: print what would be sent.")
        ] = False,
        resend_unconfirmed: Annotated[
            bool,
            typer.Option(
                "--resend-unconfirmed",
                help="Also send again messages a killed run left unconfirmed (same Message-ID).",
            ),
        ] = False,
        count_looks_busy: Annotated[
            bool,
            typer.Option(
                "--count-looks-busy",
                help="Count the busy time of jobs that look busy (GPU_UTIL high, SM and tensor "
                "activity near zero) as idle, and say so in the digest.",
            ),
        ] = False,
    ) -> None:
        """Digests of wasted GPU time to each user over the thresholds and to VC owners."""
        from gpuwaste.act.notify.run import Options
        from gpuwaste.act.notify.run import notify as run_notify

        s = settings(config, data_dir)
        opts = Options(
            since=since, until=until, cluster=cluster, smtp=smtp,
            smtp_password_env=smtp_password_env, sender=sender,
            address_template=address_template, webhook=webhook, dashboard_url=dashboard_url,
            send=send,
            resend_unconfirmed=resend_unconfirmed,
            count_looks_busy=count_looks_busy,
        )  # fmt: skip
        status = run_notify(s, opts)
        if status:
            raise typer.Exit(status)
