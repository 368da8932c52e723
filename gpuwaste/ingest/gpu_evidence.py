"""Which GPUs of its hosts a job held, from evidence other than a job label. Pure: frames in,
frames out (the reads are in `gpu_indices`).

- **Whole host** (`whole_host_pairs`): a job whose GPU count (sacct AllocTRES `gres/gpu`)
  equals the number of whole GPUs its hosts' samples show holds every one of them. Hosts whose
  samples show MIG instances are left out (a GPU count does not say which slices).
- **Device numbers** (`resolve_minors`): Slurm's `IDX` (scontrol `-d`) is the device minor
  number where gres.conf names `/dev/nvidiaN` (AutoDetect=nvml too), which is not always the
  NVML index that telemetry calls `gpu`. It is joined to the host's GPU whose samples carry that
  minor number (`gpu_minor`: DCGM `device="nvidiaN"`, Jobstats `minor_number`). Where the host's
  samples carry no minor number, it is read as the index only when the operator says so
  (`[clusters.slurm] gres_idx = "index"`), else it waits. A number naming a GPU the host does not
  have (beyond the GPUs its samples show) is refused, with its reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import polars as pl

from gpuwaste.warehouse.bookkeeping import Refused

GresIdx = Literal["minor", "index"]

HOST_GPUS_SCHEMA: dict[str, pl.DataType] = {
    "host": pl.String(),
    "gpu": pl.Int16(),
    "gpu_minor": pl.Int16(),  # null where the telemetry carries no minor number
    "mig": pl.Boolean(),  # the GPU's samples show MIG instances
}

MINORS_SCHEMA: dict[str, pl.DataType] = {
    "job_id": pl.String(),
    "slurm_job_id": pl.String(),
    "host": pl.String(),
    "minor": pl.Int16(),
}

PAIRS: dict[str, pl.DataType] = {"job_id": pl.String(), "host": pl.String(), "gpu": pl.Int16()}


def whole_host_pairs(jobs: pl.DataFrame, host_gpus: pl.DataFrame) -> pl.DataFrame:
    """(job_id, host, gpu) for the jobs that hold every GPU of every one of their hosts.

    `jobs`: job_id, hosts (list), gpus (the allocation's GPU count, null when unknown),
    mig_profile. A job qualifies when every host is seen in `host_gpus` without MIG instances
    and its GPU count equals the sum of its hosts' GPUs: a host cannot give more GPUs than it
    has, so each host gave all of its own."""
    if jobs.height == 0 or host_gpus.height == 0:
        return pl.DataFrame(schema=PAIRS)
    per_host = host_gpus.group_by("host").agg(
        pl.col("gpu").n_unique().alias("n"), pl.col("mig").any().alias("mig")
    )
    held = (
        jobs.filter(
            pl.col("gpus").is_not_null() & (pl.col("gpus") > 0) & pl.col("mig_profile").is_null()
        )
        .select("job_id", "gpus", pl.col("hosts").alias("host"))
        .explode("host")
        .drop_nulls("host")
        .join(per_host, on="host", how="left")
    )
    whole = held.group_by("job_id").agg(
        (pl.col("n").is_not_null().all() & ~pl.col("mig").fill_null(True).any()).alias("seen"),
        pl.col("n").sum().alias("n"),
        pl.col("gpus").first(),
    )
    whole = whole.filter(pl.col("seen") & (pl.col("n") == pl.col("gpus")))
    return (
        held.join(whole.select("job_id"), on="job_id", how="semi")
        .select("job_id", "host")
        .join(host_gpus.select("host", "gpu").unique(), on="host", how="inner")
        .cast(PAIRS)  # type: ignore[arg-type]
    )


@dataclass
class MinorResolution:
    """What the device numbers of `resolve_minors` gave."""

    pairs: pl.DataFrame  # job_id, host, gpu
    refused: list[Refused] = field(default_factory=list)
    # (job_id, host) whose host's samples carry no minor number while gres_idx = "minor"
    no_minor: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=PAIRS).drop("gpu"))


def resolve_minors(
    minors: pl.DataFrame, host_gpus: pl.DataFrame, gres_idx: GresIdx = "minor"
) -> MinorResolution:
    """The GPUs that device numbers (`minors`: job_id, host, minor) name on hosts whose GPUs the
    samples show (`host_gpus`). A host not in `host_gpus` gives nothing yet (its telemetry may
    come later), except with gres_idx = "index", where the number is the index itself."""
    if minors.height == 0:
        return MinorResolution(pairs=pl.DataFrame(schema=PAIRS))
    per_host = host_gpus.group_by("host").agg(
        pl.col("gpu").unique().sort().alias("gpus"),
        pl.col("gpu_minor").drop_nulls().unique().sort().alias("minors"),
    )
    m = minors.select("job_id", "host", pl.col("minor").cast(pl.Int16())).join(
        per_host, on="host", how="left"
    )
    unseen = m.filter(pl.col("gpus").is_null())
    seen = m.filter(pl.col("gpus").is_not_null())
    by_minor = seen.filter(pl.col("minors").list.len() > 0)
    by_index = seen.filter(pl.col("minors").list.len() == 0)
    lookup = host_gpus.drop_nulls("gpu_minor").select(
        "host", pl.col("gpu_minor").alias("minor"), "gpu"
    )
    named = by_minor.join(lookup.unique(["host", "minor"]), on=["host", "minor"], how="left")
    pairs = [named.drop_nulls("gpu").select("job_id", "host", "gpu")]
    bad = [
        (r["job_id"], r["host"], r["minor"], "minor numbers", r["minors"])
        for r in named.filter(pl.col("gpu").is_null()).iter_rows(named=True)
    ]
    no_minor = by_index.select("job_id", "host").unique()
    if gres_idx == "index":
        no_minor = no_minor.clear()
        inside = pl.col("gpus").list.contains(pl.col("minor"))
        pairs.append(by_index.filter(inside).select("job_id", "host", pl.col("minor").alias("gpu")))
        bad += [
            (r["job_id"], r["host"], r["minor"], "GPU indices", r["gpus"])
            for r in by_index.filter(~inside).iter_rows(named=True)
        ]
        pairs.append(unseen.select("job_id", "host", pl.col("minor").alias("gpu")))
    refused = [
        Refused(
            f"job {job} on {host}",
            f"Slurm IDX {minor} names no GPU of host {host} (its samples show {what} "
            f"{', '.join(str(v) for v in have)})",
            f"JobId={job} Nodes={host} IDX:{minor}",
        )
        for job, host, minor, what, have in sorted(bad)
    ]
    out = pl.concat([p.cast(PAIRS) for p in pairs])  # type: ignore[arg-type]
    return MinorResolution(pairs=out.unique(), refused=refused, no_minor=no_minor)
