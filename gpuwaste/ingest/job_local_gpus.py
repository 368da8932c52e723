"""Job-local GPU indices -> devices of the host, before the samples are written.

slurm-job-exporter (`Dialect.gpu_is_job_local`) labels a job's series with `gpu` = the index
among the job's OWN GPUs (nvidia-smi in the job's cgroup: its GPUs on the host in ascending host
order), so two jobs running at once on one host both have a GPU 0. Stored as given, the analyses
would take them for one shared GPU. Each job-local index i of job J on host H is stored as:

1. J's i-th GPU on H (ascending host index), where Slurm's evidence already names J's GPUs on H
   (`job_gpus` rows from whole hosts, scontrol `IDX`, Jobstats summaries), and J's earlier
   samples on H did not get a device of their own (rule 2: a job keeps one kind of device);
2. else a device of J's own: `JOB_LOCAL_BASE + slot * SLOT_GPUS + i`, `slot` the lowest that no
   other job used on H within `MARGIN` of J's samples. The slot is kept for J on H (read back
   from the stored samples of `LOOKBACK` before the new ones, and carried from window to
   window), so a later window, or ingesting
   the same data again, gives the same devices. The ties then name these devices
   (`telemetry-label`: the samples carry J's id), so J's allocation on H reads exactly J's
   samples, never another job's; the host's own index stays unknown.

Pure placement (`place`) apart from the reads (`JobLocalPlacer.from_warehouse`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

import duckdb
import polars as pl

from gpuwaste.warehouse import gpu_from
from gpuwaste.warehouse.catalog import stored_columns
from gpuwaste.warehouse.schema import GPU_SAMPLES
from gpuwaste.warehouse.store import Warehouse

JOB_LOCAL_BASE = 4096  # a stored `gpu` at or above it is a job's own device (host index unknown)
SLOT_GPUS = 16  # job-local indices per slot: the GPUs one job may hold on one host
MAX_SLOT = (32767 - JOB_LOCAL_BASE) // SLOT_GPUS - 1  # `gpu` is a smallint
# jobs whose samples on a host come closer than this may overlap in Slurm's allocation times
# (an allocation starts before its first sample, ends after its last): never the same slot
MARGIN = timedelta(hours=1)
# the stored samples read back for slots: from this long before the first new sample (a job
# whose samples stop for longer may be given a second slot; the read stays a few days' files)
LOOKBACK = timedelta(days=1)
# evidence naming the host's own GPUs (not the samples' job labels, which here are job-local)
_HOST_EVIDENCE = (gpu_from.WHOLE_HOST, gpu_from.SCONTROL, gpu_from.JOBSTATS_SUMMARY)

KNOWN_SCHEMA: dict[str, pl.DataType] = {
    "job_id": pl.String(),
    "host": pl.String(),
    "gpu": pl.Int16(),
}


def is_job_local(gpu: pl.Expr) -> pl.Expr:
    """Whether a stored `gpu` is a job's own device (rule 2 of the module's doc)."""
    return gpu >= JOB_LOCAL_BASE


@dataclass
class _Slot:
    slot: int
    first: datetime
    last: datetime


@dataclass
class JobLocalPlacer:
    """The devices given so far: (host, job) -> its slot and its samples' span (rule 2), and the
    host GPUs Slurm's evidence names per (job, host) (rule 1)."""

    known: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    slots: dict[tuple[str, str], _Slot] = field(default_factory=dict)
    placed_own: set[tuple[str, str]] = field(default_factory=set)  # (host, job) given rule 2
    placed_host: set[tuple[str, str]] = field(default_factory=set)  # (host, job) given rule 1
    left_out: int = 0  # samples with no job, or a job-local index of SLOT_GPUS or more
    stored: tuple[Warehouse, str] | None = None  # slots still to read back, at the first rows

    @classmethod
    def from_warehouse(cls, wh: Warehouse, cluster: str) -> JobLocalPlacer:
        """The cluster's Slurm evidence (`job_gpus`) and the slots its stored samples hold."""
        known: dict[tuple[str, str], list[int]] = {}
        rows = wh.read("job_gpus", cluster, "slurm")
        if rows.height and "gpu_from" in rows.columns:
            named = rows.filter(
                (pl.col("gpu") >= 0)
                & ~is_job_local(pl.col("gpu"))
                & pl.col("gpu_from").is_in(_HOST_EVIDENCE)
            )
            for (job, host), part in named.group_by("job_id", "host"):
                known[(str(host), str(job))] = sorted(set(part["gpu"].to_list()))
        return cls(known=known, stored=(wh, cluster))

    def place(self, rows: pl.DataFrame) -> pl.DataFrame:
        """`gpu_samples` rows of a job-local dialect with `gpu` the job's own index -> the same
        rows with `gpu` a device of the host (the module's rules)."""
        if rows.height == 0:
            return rows
        if self.stored is not None:
            # the sources give their rows in time order: the first rows are the earliest
            since = rows["ts"].min()
            assert isinstance(since, datetime)
            for host, job, slot, first, last in _stored_slots(*self.stored, since - LOOKBACK):
                self.slots.setdefault((host, job), _Slot(slot, first, last))
            self.stored = None
        local = pl.col("gpu").cast(pl.Int32)
        spans = (
            rows.filter(pl.col("job_id").is_not_null())
            .group_by("host", "job_id")
            .agg(pl.col("ts").min().alias("first"), pl.col("ts").max().alias("last"))
            .sort("first", "host", "job_id")
        )
        mapping: list[tuple[str, str, int, int]] = []  # host, job, local index, stored gpu
        locals_of = _locals(rows)
        for host, job, first, last in spans.iter_rows():
            key = (host, job)
            wanted = locals_of[key]
            gpus = self.known.get(key, [])
            if key not in self.slots and gpus and max(wanted) < len(gpus):
                mapping += [(host, job, i, gpus[i]) for i in wanted]
                self.placed_host.add(key)
                continue
            got = self.slots.get(key)
            if got is None:
                got = _Slot(self._free_slot(host, first, last), first, last)
                self.slots[key] = got
            else:
                got.first, got.last = min(got.first, first), max(got.last, last)
            self.placed_own.add(key)
            mapping += [
                (host, job, i, JOB_LOCAL_BASE + got.slot * SLOT_GPUS + i)
                for i in wanted
                if i < SLOT_GPUS
            ]
        table = pl.DataFrame(
            mapping,
            schema={"host": pl.String, "job_id": pl.String, "_local": pl.Int32, "_gpu": pl.Int16},
            orient="row",
        )
        out = rows.with_columns(local.alias("_local")).join(
            table, on=["host", "job_id", "_local"], how="left", maintain_order="left"
        )
        # a row without its job (slurm-job-exporter's series always name it) or beyond
        # SLOT_GPUS local indices has no device of the host: left out, and counted
        placed = pl.col("_gpu").is_not_null()
        self.left_out += out.height - int(out.select(placed.sum()).item())
        return out.filter(placed).with_columns(pl.col("_gpu").alias("gpu")).drop("_local", "_gpu")

    def _free_slot(self, host: str, first: datetime, last: datetime) -> int:
        used = {
            s.slot
            for (h, _), s in self.slots.items()
            if h == host and s.first - MARGIN <= last and first <= s.last + MARGIN
        }
        slot = next(i for i in range(MAX_SLOT + 2) if i not in used)
        if slot > MAX_SLOT:
            raise ValueError(
                f"host {host} has more than {MAX_SLOT + 1} jobs at once with job-local GPU "
                "indices: they cannot all be given devices of their own"
            )
        return slot

    def note(self) -> str:
        """What the placement did, for the ingest's note ('' when nothing was placed)."""
        if not self.placed_own and not self.placed_host and not self.left_out:
            return ""
        lost = f", {self.left_out:,} sample(s) with no job left out" if self.left_out else ""
        return (
            f"; job-local GPU indices: {len(self.placed_host)} job-host pair(s) placed on the "
            f"host's GPUs Slurm named, {len(self.placed_own)} kept on devices of their own "
            f"(host GPU unknown: gpu >= {JOB_LOCAL_BASE}){lost}"
        )


def _locals(rows: pl.DataFrame) -> dict[tuple[str, str], list[int]]:
    got = (
        rows.filter(pl.col("job_id").is_not_null())
        .group_by("host", "job_id")
        .agg(pl.col("gpu").cast(pl.Int32).unique().sort())
    )
    return {(h, j): list(g) for h, j, g in got.iter_rows()}


def _stored_slots(
    wh: Warehouse, cluster: str, since: datetime
) -> list[tuple[str, str, int, datetime, datetime]]:
    """(host, job, slot, first, last sample since `since`) of the job-local devices stored."""
    base = wh.cluster_dir(GPU_SAMPLES.name, cluster)
    files = sorted(base.glob("date=*/*.parquet"))
    if not files or "job_id" not in stored_columns(GPU_SAMPLES, files):
        return []
    glob = str(base / "date=*" / "*.parquet").replace("'", "''")
    con = duckdb.connect(":memory:")
    try:
        con.execute("SET TimeZone = 'UTC'")
        rows = con.sql(
            f"""
            select host, job_id, (gpu - {JOB_LOCAL_BASE}) // {SLOT_GPUS} as slot,
                   min(ts), max(ts)
            from read_parquet('{glob}', hive_partitioning = true, union_by_name = true)
            where gpu >= {JOB_LOCAL_BASE} and job_id is not null
              and date >= cast($1 as date) and ts >= $1
            group by all
            """,
            params=[since],
        ).fetchall()
    finally:
        con.close()
    return [(str(h), str(j), int(s), a, b) for h, j, s, a, b in rows]
