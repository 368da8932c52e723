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
        from gpuwaste.render import _json_default

        s = settings(config, data_dir)
        try:
            data = gather(s.data_dir, job_id, cluster, s.notify.dashboard_url)
        except UnknownJob as exc:
            print(f"gpuwaste: {exc}", file=sys.stderr)
            raise typer.Exit(UNKNOWN_JOB_EXIT) from None
        if fmt == JobFormat.json:
            json.dump(as_dict(data), sys.stdout, default=_json_default, indent=1)
            sys.stdout.write("\n")
        else:
            sys.stdout.write(render_text(data))
