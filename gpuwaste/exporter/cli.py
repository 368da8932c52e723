"""`gpuwaste exporter`: serve the warehouse's waste figures to Prometheus, read-only."""

from __future__ import annotations

import logging
import sys
from typing import Annotated

import typer

from gpuwaste.cli_common import ConfigOpt, DataDirOpt, settings


def _logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("gpuwaste exporter: %(message)s"))
    logger = logging.getLogger("gpuwaste.exporter")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


def register(app: typer.Typer) -> None:
    """Add the exporter command to the main app."""

    @app.command()
    def exporter(
        data_dir: DataDirOpt = None,
        host: Annotated[
            str | None,
            typer.Option(
                help="Address to listen on (default: exporter.host of the config, else 127.0.0.1)."
            ),
        ] = None,
        port: Annotated[
            int | None,
            typer.Option(
                help="Port to listen on (default: exporter.port of the config, else 9815)."
            ),
        ] = None,
        cache_seconds: Annotated[
            float | None,
            typer.Option(
                "--cache-seconds",
                min=0,
                help="Read the figures at most once per this many seconds (default: "
                "exporter.cache_seconds of the config, else 60).",
            ),
        ] = None,
        top_jobs: Annotated[
            int | None,
            typer.Option(
                "--top-jobs",
                min=0,
                help="Idle running jobs exported one by one; the rest as one '(other)' series "
                "per cluster (default: exporter.top_jobs of the config, else 50).",
            ),
        ] = None,
        config: ConfigOpt = None,
    ) -> None:
        """Prometheus exporter: waste per cluster and VC, idle running jobs, pipeline health."""
        from gpuwaste.exporter.collector import WasteCollector
        from gpuwaste.exporter.server import serve_forever

        s = settings(config, data_dir)
        conf = s.exporter
        _logging()
        collector = WasteCollector(
            s.data_dir,
            top_jobs=conf.top_jobs if top_jobs is None else top_jobs,
            cache_seconds=conf.cache_seconds if cache_seconds is None else cache_seconds,
            update_interval_s=conf.update_interval_s,
            currency=s.cost.currency,
        )
        serve_forever(collector, conf.host if host is None else host,
                      conf.port if port is None else port, conf.idle_timeout_s)  # fmt: skip
