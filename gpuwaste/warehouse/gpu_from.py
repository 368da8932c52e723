"""Where a `job_gpus` row's GPU came from: the values of its `gpu_from` column, declared once.

A scheduler that names hosts but not GPUs leaves the GPU to be found from other evidence; each
row records which evidence gave it, so that a reader can weigh it (and the Overview can show how
much GPU time stayed unresolved). In the order the Slurm source prefers them
(docs/ingest-files.md#slurm):

- `telemetry-label`: the samples of that GPU carry the job's id (DCGM `hpc_job`, a pod label);
  also every allocation derived from telemetry labels alone.
- `whole-host`: the job holds every GPU of the host (its GPU count equals the GPUs the host's
  samples show), so it holds each of them.
- `scontrol`: Slurm's own per-node GPU index (`IDX` of `scontrol show job -d`, from a file, a
  folder of captures, or a capture taken at a scheduled ingest), joined to the GPU by its
  device minor number (or by index, when the operator says they are equal).
- `jobstats-summary`: Princeton Jobstats' job summary (sacct `AdminComment`, `JS1:`), which
  names the minor number of every GPU of the job.
- `export`: a tabular export's per-host GPU indices (`allocation` column).
- `trace`: a trace that names the GPUs itself (Philly's job log).
- `unknown`: the host is known but not the GPU (`gpu = -1`); such rows count no GPU time (never
  as idle) until later evidence resolves them.

Rows written before the column existed read as null.
"""

from __future__ import annotations

TELEMETRY_LABEL = "telemetry-label"
WHOLE_HOST = "whole-host"
SCONTROL = "scontrol"
JOBSTATS_SUMMARY = "jobstats-summary"
EXPORT = "export"
TRACE = "trace"
UNKNOWN = "unknown"

GPU_FROM_VALUES = (TELEMETRY_LABEL, WHOLE_HOST, SCONTROL, JOBSTATS_SUMMARY, EXPORT, TRACE, UNKNOWN)
