"""Job stdout/stderr logs: failure signatures per attempt (`gpuwaste ingest logs`)."""
