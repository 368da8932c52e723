"""`scontrol show job -d` captures: read from a file, a folder of captures, or taken by running
the configured command at every `ingest slurm`; their per-node `IDX` kept in `job_gpu_minors`.
Each may be the text output or `scontrol --json show job` (told apart by its first character).

slurmctld forgets a job `MinJobAge` (300 s by default) after it ends, and sacct does not keep
the GPU indices, so the only record of which GPUs a job held (where no telemetry label names the
job) is a capture taken while it ran. A capture taken by the command is stored as
`<data_dir>/captures/scontrol/cluster=<c>/scontrol-<UTC time>.txt`; it is deleted once none of
its device numbers is still waiting for its job's GPUs (`gpu_indices.prune_minors`), and after
`scontrol_keep_days` in any case. The device numbers read are upserted into `job_gpu_minors`,
where they wait for the job's sacct record and for samples that say which GPU each one is (a
capture usually comes before the job's end, hence before the sacct record that finishes it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import polars as pl

from gpuwaste.config import FileLimits, SlurmSource
from gpuwaste.ingest.base import IngestError
from gpuwaste.ingest.files import check_read_whole
from gpuwaste.ingest.gpu_indices import JOB_GPUS_KEY, stored_minors
from gpuwaste.ingest.slurm.command import run_command
from gpuwaste.ingest.slurm.scontrol_parse import ScontrolFormatError, parse_any
from gpuwaste.warehouse import gpu_from
from gpuwaste.warehouse.bookkeeping import Refused
from gpuwaste.warehouse.schema import UTC_TS
from gpuwaste.warehouse.store import Warehouse

WHAT = "scontrol show job -d"

MINOR_ROWS: dict[str, pl.DataType] = {
    "job_id": pl.String(),
    "slurm_job_id": pl.String(),
    "host": pl.String(),
    "minor": pl.Int16(),
    "gpu_from": pl.String(),
    "capture": pl.String(),
    "seen_ts": UTC_TS,
}


def capture_dir(data_dir: Path, cluster: str) -> Path:
    return data_dir / "captures" / "scontrol" / f"cluster={cluster}"


@dataclass
class ScontrolRead:
    """What the scontrol inputs of one run gave."""

    records: int = 0  # job records read
    minors: int = 0  # (job, host, IDX) rows read
    refused: list[Refused] = field(default_factory=list)
    files: list[str] = field(default_factory=list)


def _input_files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith("."))
    return [path]


def _read(path: Path, limits: FileLimits) -> str:
    check_read_whole(path, WHAT, limits)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise IngestError(f"{WHAT} file {path} does not exist.") from None
    except OSError as exc:
        raise IngestError(f"could not read {WHAT} file {path}: {exc.strerror or exc}.") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise IngestError(
            f"{path} is not a text file (not UTF-8); expected {WHAT} output."
        ) from None


def take_capture(cfg: SlurmSource, folder: Path, now: datetime) -> Path:
    """Run the configured scontrol command and store its output, named by the UTC time."""
    assert cfg.scontrol_command
    env = {**os.environ, "TZ": "UTC", "SLURM_TIME_FORMAT": "standard"}
    text = run_command(cfg.scontrol_command, "scontrol", cfg.command_timeout_s, env)
    path = folder / f"scontrol-{now.strftime('%Y%m%dT%H%M%SZ')}.txt"
    folder.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text, encoding="utf-8", errors="surrogateescape")
    os.replace(tmp, path)  # a capture is whole or absent
    return path


def read_scontrol(
    wh: Warehouse,
    cluster: str,
    cfg: SlurmSource,
    limits: FileLimits,
    now: datetime,
) -> ScontrolRead:
    """Read the configured scontrol file or folder, and take a capture if a command is
    configured; upsert the device numbers into `job_gpu_minors`. A file that is not scontrol
    output at all is an IngestError before anything is written."""
    paths = _input_files(cfg.scontrol_file) if cfg.scontrol_file is not None else []
    texts = [(str(p), _read(p, limits)) for p in paths]
    if cfg.scontrol_command:
        taken = take_capture(cfg, capture_dir(wh.data_dir, cluster), now)
        texts.append((str(taken), taken.read_text(encoding="utf-8", errors="surrogateescape")))
    out = ScontrolRead(files=[t[0] for t in texts])
    frames = []
    for location, text in texts:
        try:
            sc = parse_any(text, location)
        except ScontrolFormatError as exc:
            raise IngestError(f"{location}: {exc}.") from None
        out.records += sc.accepted
        out.refused.extend(sc.refused)
        frames.append(
            sc.gpus.select(
                pl.col("job_id_raw").alias("job_id"),
                pl.col("job_id").alias("slurm_job_id"),
                "host",
                pl.col("gpu").alias("minor"),
                pl.lit(gpu_from.SCONTROL).alias("gpu_from"),
                pl.lit(location).alias("capture"),
                pl.lit(now).alias("seen_ts"),
            ).cast(MINOR_ROWS)  # type: ignore[arg-type]
        )
    rows = pl.concat(frames) if frames else pl.DataFrame(schema=MINOR_ROWS)
    out.minors = rows.height
    if rows.height:
        wh.upsert("job_gpu_minors", cluster, JOB_GPUS_KEY, rows)
    return out


def prune_captures(wh: Warehouse, cluster: str, keep_days: float, now: datetime) -> int:
    """Delete the stored captures that no kept device number comes from, and those older than
    `keep_days`; returns how many."""
    folder = capture_dir(wh.data_dir, cluster)
    if not folder.is_dir():
        return 0
    kept = stored_minors(wh, cluster)
    referenced = set(kept["capture"].drop_nulls().to_list()) if kept.height else set()
    oldest = (now - timedelta(days=keep_days)).timestamp()
    removed = 0
    for path in folder.glob("scontrol-*.txt"):
        try:
            old = path.stat().st_mtime < oldest
        except FileNotFoundError:
            continue
        if old or str(path) not in referenced:
            path.unlink(missing_ok=True)
            removed += 1
    return removed
