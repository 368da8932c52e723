"""`gpuwaste exporter`: the warehouse's waste figures as Prometheus metrics (docs/exporter.md).

- `figures.py`: reads the figures from the warehouse, read-only (SQL in `gpuwaste/sql/exporter/`,
  the running idle jobs and the pipeline's freshness through the queries the dashboard and
  `gpuwaste report` already use);
- `metrics.py`: pure, the figures as Prometheus metric families;
- `collector.py`: the prometheus_client collector, computing the figures at most once per
  `cache_seconds`, and serving `gpuwaste_up 0` instead of an error when it cannot;
- `server.py`: the HTTP server; `cli.py`: the command.
"""
