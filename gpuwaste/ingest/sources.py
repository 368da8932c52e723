"""Imports every ingestor module so each registers its source (see base.register_source)."""
