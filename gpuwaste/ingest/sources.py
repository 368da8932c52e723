"""Imports every ingestor module so each registers its source (see base.register_source)."""

from gpuwaste.ingest import file_runners, prometheus_runners

__all__ = ["file_runners", "prometheus_runners"]
