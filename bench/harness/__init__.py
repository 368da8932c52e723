"""The real components that tests and benchmarks both run against: a Prometheus server, Chromium
with a dashboard server, a standalone Spark cluster, a result warehouse of known figures, and the
checks that a component is there (`components`). Importable from bench/ (a script's own folder)
and from the tests (pytest's `pythonpath`, pyproject.toml); the tests' own fixtures stay in
tests/support."""
