"""Which GPU (the NVML index that `job_gpus.gpu` and the samples use) each GPU of a Jobstats
summary is. Pure: frames in, a frame out (the samples are read by the source).

A summary names GPUs by device minor number (`/dev/nvidiaN`, Jobstats' `minor_number`), which is
not always the NVML index. Per host, as the samples show it (`gpu_indices.host_gpus_from_samples`):
- samples that carry minor numbers (`gpu_minor`): the GPU whose samples carry that number; a
  number they do not show ties nothing (`gpu` null);
- samples without minor numbers: the number is the index only where the operator says so
  (`[clusters.slurm] gres_idx = "index"`, the same rule as Slurm's IDX), else it ties nothing:
  a guess would join the summary's GPU to another GPU's samples;
- no samples at all (a history older than the telemetry's retention, no telemetry): **the minor
  number itself**, which is the same GPU of the host every time and equals the index where the
  driver numbers devices in PCI order as NVML does (the usual case).
"""

from __future__ import annotations

import polars as pl

from gpuwaste.ingest.gpu_evidence import GresIdx


def summary_gpus(summaries: pl.DataFrame, host_gpus: pl.DataFrame, gres_idx: GresIdx) -> pl.Series:
    """`gpu` for each row of `summaries` (host, gpu_minor), in its order; null: no tie."""
    per_host = host_gpus.group_by("host").agg(
        pl.col("gpu_minor").drop_nulls().len().alias("minors")
    )
    lookup = (
        host_gpus.drop_nulls("gpu_minor")
        .select("host", "gpu_minor", pl.col("gpu").alias("by_minor"))
        .unique(["host", "gpu_minor"], keep="none")  # a number at two indices: no tie
    )
    m = (
        summaries.select("host", "gpu_minor")
        .with_row_index("row")
        .join(per_host, on="host", how="left")
        .join(lookup, on=["host", "gpu_minor"], how="left")
        .sort("row")
    )
    unseen = pl.col("minors").is_null()
    without_minors = pl.col("minors") == 0
    return m.select(
        pl.when(unseen | (without_minors & (pl.lit(gres_idx) == "index")))
        .then(pl.col("gpu_minor"))
        .when(without_minors)
        .then(None)
        .otherwise(pl.col("by_minor"))
        .cast(pl.Int16())
        .alias("gpu")
    )["gpu"]
