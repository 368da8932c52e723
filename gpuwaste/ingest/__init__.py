"""`gpuwaste ingest`: sources -> the warehouse's fact tables.

One sub-package per source, each with a pure `parse`, a `source` (I/O, writes, and the runner
that `sources.py` lists) and a `cli` (its subcommand):

- `prometheus/`: the Prometheus HTTP API (`client`, `parse`, `source`), saved OpenMetrics files
  (`openmetrics_parse`, `openmetrics_source`), the row builders both share (`rows`), Kubernetes
  pods from kube-state-metrics (`kube`) and jobs from the samples' job labels
  (`telemetry_jobs`);
- `slurm/`: sacct (`parse`) and `scontrol show job -d` (`scontrol_parse`);
- `philly/`: the Microsoft Philly trace;
- `tabular/`: generic CSV / parquet exports with a column mapping.

Shared by the sources: `sources.py` (the list of sources, in run order), `run.py` (running them
under the writer lock), `cli.py` + `cli_options.py` (the `ingest` command group), `base.py`
(result, error, run options, the Source declaration), `progress.py`, `secrets.py`,
`job_precedence.py` (label jobs vs scheduler jobs), `gpu_indices.py` (GPU indices of host-only
allocations) and `slurm_notation.py` (host lists, index lists, job states).
"""
