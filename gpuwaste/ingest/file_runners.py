"""Source runners registered with gpuwaste.ingest.base.register_source."""
