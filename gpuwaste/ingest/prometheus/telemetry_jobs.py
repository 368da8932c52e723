"""Jobs and their GPUs from telemetry labels alone (pure: frames in, frames out).

Where a cluster exports only DCGM series labelled with a job (`hpc_job`) or a pod, and has no
scheduler source, the labels still say which job held which GPU and when:

- `job_gpus`: one row per (job, host, gpu, MIG instance): start = first labelled sample, end = last labelled
  sample + one scrape interval (a sample stands for the interval after it). Attempt 0. A MIG
  instance's span carries its profile and model; `gpus` counts devices (GPUs and instances).
- `jobs`: one row per job: start and end over its GPUs, `gpus` = number of distinct GPUs,
  `state` = `running` while the job was seen within `running_slack` of the newest data ingested,
  else unknown (null; `raw_state` = `ended`): telemetry does not say how a job ended.
  `is_debug` is false: nothing declared the job a debugging one (it may still be *inferred*
  interactive by the analyses).

Incremental: `merge_spans` folds a new window's spans into the stored ones (earliest start,
latest end), so ingesting a window again changes nothing.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import polars as pl

from gpuwaste.warehouse import gpu_from
from gpuwaste.warehouse.schema import JOB_GPUS, JOBS, UTC_TS, conform


def spans_from_samples(gpu_rows: pl.DataFrame, interval_s: float) -> pl.DataFrame:
    """`gpu_samples` rows -> job_gpus rows for the samples that carry a job_id."""
    step = timedelta(seconds=interval_s)
    spans = (
        gpu_rows.filter(pl.col("job_id").is_not_null())
        .group_by("job_id", "host", "gpu", "gpu_instance")
        .agg(
            pl.col("ts").min().alias("start_ts"),
            (pl.col("ts").max() + step).alias("end_ts"),
            pl.col("mig_profile").drop_nulls().first(),
            pl.col("gpu_model").drop_nulls().first(),
        )
        .with_columns(
            pl.lit(0, dtype=pl.Int16).alias("attempt"),
            pl.lit(gpu_from.TELEMETRY_LABEL).alias("gpu_from"),
        )
    )
    return conform(spans, JOB_GPUS, stored=True)


def merge_spans(old: pl.DataFrame, new: pl.DataFrame) -> pl.DataFrame:
    """Stored spans + a window's spans -> one span per (job, attempt, host, gpu)."""
    both = pl.concat(
        [conform(old, JOB_GPUS, stored=True), conform(new, JOB_GPUS, stored=True)],
        how="vertical_relaxed",
    )
    key = ["job_id", "attempt", "host", "gpu", "gpu_instance"]
    merged = both.group_by(key).agg(
        pl.col("start_ts").min(),
        pl.col("end_ts").max(),
        pl.col("mig_profile").drop_nulls().first(),
        pl.col("gpu_model").drop_nulls().first(),
    )
    return conform(merged, JOB_GPUS, stored=True).sort(key)


def jobs_from_spans(
    spans: pl.DataFrame, *, newest: datetime, running_slack: timedelta, source: str
) -> pl.DataFrame:
    """job_gpus rows -> jobs rows (see the module docstring for state)."""
    running = pl.col("end_ts") >= pl.lit(newest - running_slack).cast(UTC_TS)
    jobs = (
        spans.group_by("job_id")
        .agg(
            pl.col("start_ts").min(),
            pl.col("end_ts").max(),
            pl.struct("host", "gpu", "gpu_instance").n_unique().cast(pl.Int32).alias("gpus"),
        )
        .select(
            "job_id",
            "start_ts",
            pl.when(running).then(None).otherwise(pl.col("end_ts")).alias("end_ts"),
            "gpus",
            pl.when(running).then(pl.lit("running")).otherwise(None).alias("state"),
            pl.when(running).then(pl.lit("running")).otherwise(pl.lit("ended")).alias("raw_state"),
            pl.lit(False).alias(
                "is_debug"
            ),  # no scheduler marked it (docs/definitions.md#debugging-jobs)
            pl.lit(source).alias("source"),
        )
    )
    return conform(jobs, JOBS, stored=True).sort("job_id")
