"""Synthetic multi-tenant GPU cluster with planted ground truth.

`simulate(spec)` builds the model (scheduler, jobs, what each GPU does); `write_all(spec, out)`
writes it in the sources' own formats (OpenMetrics for promtool backfill, `sacct --parsable2`,
the five Philly trace files) plus `truth.json`; `write_samples_parquet(spec, out_dir)` writes
the gpu_samples rows straight to parquet for benchmarks. Same spec, same bytes.

Sampling and time conventions (analyses must recover the truth within one sampling interval)
----------------------------------------------------------------------------------------------
- The window is [start, start + days) with sample k at start + k * interval_s,
  0 <= k < round(days * 86400 / interval_s); the end is exclusive. Every GPU and host has a
  sample at every k, except GPU samples inside data gaps.
- Job times are whole seconds, not aligned to samples. A sample at time t belongs to a job when
  start <= t < end (for a job running at the window end: start <= t). Its DCGM series then has
  `hpc_job="<JobIDRaw>"`; unallocated samples have util 0, memory 0 and no `hpc_job`.
- `spec.telemetry` names the GPU exporter's dialect metrics.om is written in (gpuwaste/dialects.py,
  generate/telemetry.py): the same samples, jobs and truth in every dialect. Where the series
  do not name the job (`job_labels=False` for DCGM, nvidia-smi), `scontrol/*.txt` holds the
  `scontrol show job -d` captures of a 5-minute scheduled ingest (generate/scontrol.py); for
  Jobstats, sacct.txt has an AdminComment column with each ended job's `JS1:` summary.
- A GPU's `gpu` is its NVML index; its `minor` (/dev/nvidiaN: DCGM's `device`, Jobstats'
  `minor_number`, Slurm's `IDX`) differs from the index on every second host, from the first.
- `job_id` is JobIDRaw everywhere (truth, frames, DCGM `hpc_job`, parquet `job_id`);
  `slurm_job_id` is the JobID column as sacct prints it (`1200_3` for array tasks).
- The cluster is empty at the window start; jobs still queued at the window end are left out;
  jobs running at the window end have no end (sacct `Unknown`, truth `null`).

truth.json (sorted keys; times ISO 8601 UTC with `Z`)
-----------------------------------------------------
- `jobs`: every Slurm job: job_id, job_id_raw, slurm_job_id, array_job_id, array_task,
  philly_jobid, philly_attempt, user, vc, name, partition, qos, state, raw_state, exit_code,
  is_debug, submit, start, end, timelimit_s, gpus, alloc [{host, gpu, minor, uuid}], attempts (the
  Philly job's attempts as written: start/end null where the file says "None"), planted (tags:
  slow_start[_long], unreleased[_long], mid_idle, short_zero, stall, checkpointing, fluctuating,
  non_dl, oversubscription, never_used, debug; busy_loop with --busy-loops), first_sample,
  n_samples.
  A job cancelled before it started has start == end and no alloc.
- `phases`: for every allocated (job, GPU) with samples, the maximal runs of one planted memory
  level, covering all its samples: {job_id, host, gpu, start, end, mem_mib}. `start` is the
  first sample of the run; `end` is the first sample of the next run, or the job's end (window
  end if running). Samples hold mem_mib +- 6 MiB; consecutive non-zero levels differ by at least
  2 GiB. mem_mib 0 marks runs where the GPU holds no memory (idle slots, short zero runs, never
  used GPUs). A data gap never touches a run's first or last two samples.
- `idle_slots`: the mem_mib == 0 runs of GPUs that are used at some point in the job, lasting
  end - start > 60 s; `short_zero_runs`: those lasting <= 60 s (planted ones last <= 45 s,
  idle slots >= 75 s, so either way of measuring a run lands on the same side of 60 s).
  Utilization is 0 exactly where memory is 0 inside a job's used GPUs, and also in `stall`
  stretches (memory held, utilization 0: not idle). Slow starts and unreleased GPUs tagged
  `_long` are idle slots of >= 10.5 min at the job's first sample / up to the job's end.
- `never_used`: {job_id, host, gpu} whose every sample in the job is util 0 and memory 0; their
  time is not in `idle_slots`.
- `gaps`: {host, gpu, start, end}: no GPU-exporter samples for start <= t < end (all three DCGM
  families; node-exporter series have no gaps). Gaps lie inside a steady phase (two samples
  clear of its edges) or in unallocated time (two samples clear of any allocation).
- `energy`: per (job, GPU) with samples, {job_id, host, gpu, samples, energy_kwh,
  lost_energy_kwh}: the planted power x interval of its present samples, and of those in its
  idle slots (all of it on a never-used GPU).
- `power`: `models` {model name: {idle_w, held_w, loaded_w}}, the power planted per GPU model
  (idle; no kernel but memory held; at 100 % utilization, generate/power.py), and
  `counter_resets` [{host, gpu, ts}]: where the energy counter restarts from 0 (a reboot; `ts`
  the first sample counted from 0).
- `busy_loops` (only with `--busy-loops`, generate/busy_loops.py): the jobs planted as busy loops,
  {job_id, start, end, gpus, coarse_pct (GPU_UTIL: 100), sm_pct_max, power_w_max}.
- `requeues` (only with `--requeues`, generate/requeues.py): the retry chains planted as Slurm
  requeues, {job_id, slurm_job_id, runs: [{attempt, submit, start, end, raw_state, exit_code,
  gpus, hosts}]}; their runs share the job id everywhere, so `jobs` lists one entry per run.
- `debug_jobs`: job ids of partition `debug` (names interactive, bash, jupyter);
  `timeouts`: debug jobs that hit the 8 h limit (state TIMEOUT, end - start == 8 h exactly).
- `hosts`, `philly_machine_map` (host -> m<N>), `philly_vc_map`, `philly_user_map` (name -> the
  6-hex hash), `philly_quirks` (where the planted format quirks are), `users`, `spec`, `window`,
  `openmetrics_samples` (samples written per family), `telemetry` ({dialect, job_labels,
  captured_jobs: the jobs some scontrol capture saw running, null without captures}).
"""

from gpuwaste.generate.cli import generate_command
from gpuwaste.generate.frames import job_gpus_frame, jobs_frame
from gpuwaste.generate.model import Cluster, GeneratorSpec
from gpuwaste.generate.output import write_all
from gpuwaste.generate.parquet import write_samples_parquet
from gpuwaste.generate.simulate import simulate

__all__ = [
    "Cluster",
    "GeneratorSpec",
    "generate_command",
    "job_gpus_frame",
    "jobs_frame",
    "simulate",
    "write_all",
    "write_samples_parquet",
]
