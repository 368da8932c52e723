"""The job logs source: a folder of job stdout/stderr files -> `job_logs` (I/O and writes;
file names and text in `logs.parse`, the rules in `logs.rules`).

Incremental: each file's size, mtime and the digest of the rules it was matched with are kept in
its `job_logs` row; a file whose three are unchanged is not opened again, a file that grew (or
was rewritten, or the rules changed) is read and matched again and its row replaced; a row whose
attempt its name no longer gives (`renamed_attempts`) is corrected without reading. A file is
read from its last `tail_mib` MiB only (memory stays bounded by that, whatever the file's size:
the error that ended a job is at its end); a `.gz` log (`slurm-123.out.gz`, its name matched
without `.gz`) is decompressed as a stream keeping only that tail, within `[files]`'s bounds on
decompressed bytes (`files.read_tail`): a gzip bomb is quarantined with its reason. Files whose name the pattern does not match, and
files that cannot be read (permissions), are quarantined with the reason, per folder; the
others are read. Files gone from the folder keep their rows (a rotated
log still tells why its attempt failed). Only the matched line is stored, never the log.
"""

from __future__ import annotations

import os
import re
from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from gpuwaste.config import ClusterConfig, FileLimits, LogsSource, Settings
from gpuwaste.ingest.base import IngestError, IngestResult, RunOptions
from gpuwaste.ingest.files import OverBound, read_tail
from gpuwaste.ingest.logs.parse import log_name, tail_text
from gpuwaste.ingest.logs.rules import RuleSet, match_text, rule_set
from gpuwaste.warehouse.bookkeeping import (
    LOGS_SOURCE,
    Refused,
    get_watermark,
    set_watermark,
    write_quarantine,
)
from gpuwaste.warehouse.schema import JOB_LOGS
from gpuwaste.warehouse.store import Warehouse

SOURCE = LOGS_SOURCE


def _files(root: Path) -> list[Path]:
    if not root.is_dir():
        raise IngestError(f"job log folder {root} does not exist (or is not a folder).")
    return sorted(p for p in root.rglob("*") if p.is_file())


def scan_logs(
    wh: Warehouse, cluster: str, cfg: LogsSource, rules: RuleSet, limits: FileLimits
) -> tuple[pl.DataFrame, list[Refused], int, int]:
    """(rows of the files read now and of the rows whose attempt was corrected, refused file
    names, files unchanged since their last read, rows corrected)."""
    pattern = re.compile(cfg.pattern)
    stored = wh.read("job_logs", cluster, SOURCE)
    known = {
        r["path"]: (r["size"], r["mtime_ns"], r["rules"]) for r in stored.iter_rows(named=True)
    }
    tail_bytes = int(cfg.tail_mib * (1 << 20))
    rows: list[dict[str, object]] = []
    refused: list[Refused] = []
    unchanged = 0
    now = datetime.now(UTC)
    for path in _files(cfg.dir):
        rel = path.relative_to(cfg.dir).as_posix()
        name = log_name(path.name, pattern)
        if name is None:
            refused.append(
                Refused(rel, "file name matches no job by the [logs] pattern", path.name)
            )
            continue
        try:
            st = os.stat(path)
            if known.get(rel) == (st.st_size, st.st_mtime_ns, rules.digest):
                unchanged += 1
                continue
            data, whole = read_tail(path, "job log", limits, tail_bytes)
        except OSError as exc:  # one unreadable file does not stop the others
            refused.append(Refused(rel, f"could not be read: {exc.strerror or exc}", path.name))
            continue
        except OverBound as exc:  # a gzip bomb: refused, the others read
            refused.append(Refused(rel, exc.reason, path.name))
            continue
        except IngestError as exc:  # a damaged .gz
            refused.append(Refused(rel, f"could not be read: {exc}", path.name))
            continue
        text = tail_text(data, from_start=whole)
        found = match_text(text, rules)
        rows.append(
            {
                "path": rel,
                "job_key": name.job_key,
                "attempt": name.attempt,
                "size": st.st_size,
                "mtime_ns": st.st_mtime_ns,
                "rules": rules.digest,
                "reason": found.reason if found else None,
                "sources": ",".join(found.sources) if found else None,
                "implicit": found.implicit if found else None,
                "rank": found.rank if found else None,
                "line_no": found.line_no if found else None,
                "line": found.line if found else None,
                "read_at": now,
            }
        )
    schema = pl.Schema(JOB_LOGS.stored_columns)
    read = pl.DataFrame(rows, schema=schema)
    renamed = renamed_attempts(stored, pattern, set(read["path"]))
    return pl.concat([read, renamed.select(read.columns)]), refused, unchanged, renamed.height


def renamed_attempts(
    stored: pl.DataFrame, pattern: re.Pattern[str], read: set[str]
) -> pl.DataFrame:
    """The stored rows, not read again now, whose attempt is not the one their name gives today,
    with that attempt: a warehouse written when a name without an attempt was attempt 0 (now
    null), or a changed `pattern`. Files gone from the folder too: their match still counts, so
    their attempt must mean what it means now. A name the pattern no longer takes keeps its row.
    `log_name`'s rule over every row at once (polars' regex engine: the `[logs] pattern` is
    checked to compile in it, `config.LogsSource`)."""
    if stored.height == 0:
        return stored
    regex = pattern.pattern
    name = pl.col("path").str.extract(r"([^/]*)$", 1)
    # a compressed log's name is matched without its .gz when the pattern does not take it
    matched = (
        pl.when(name.str.contains(regex) | ~name.str.ends_with(".gz"))
        .then(name)
        .otherwise(name.str.strip_suffix(".gz"))
        .str.extract_groups(regex)
    )
    job = matched.struct.field("job")
    attempt = (
        matched.struct.field("attempt").replace("", None).cast(pl.Int16, strict=False)
        if "attempt" in pattern.groupindex
        else pl.lit(None, pl.Int16)
    )
    return (
        stored.with_columns(job.alias("_job"), attempt.alias("_attempt"))
        .filter(
            ~pl.col("path").is_in(list(read))
            & (pl.col("_job").is_not_null() & (pl.col("_job") != ""))
            & pl.col("_attempt").ne_missing(pl.col("attempt"))
        )
        .with_columns(pl.col("_attempt").alias("attempt"))
        .select(stored.columns)
    )


def ingest_logs(settings: Settings, cluster: ClusterConfig) -> IngestResult:
    """Read the new and changed log files of one cluster's folder and write their rows."""
    cfg = cluster.logs
    if cfg is None:
        raise IngestError(f"cluster '{cluster.name}' has no [logs] source configured.")
    wh = Warehouse(settings.data_dir)
    rules = rule_set(settings.failures)
    rows, refused, unchanged, corrected = scan_logs(wh, cluster.name, cfg, rules, settings.files)
    written = {"job_logs": wh.upsert("job_logs", cluster.name, SOURCE, rows) if rows.height else 0}
    written["quarantine"] = write_quarantine(wh, cluster.name, SOURCE, str(cfg.dir), refused)
    if rows.height:
        newest = datetime.fromtimestamp(int(rows["mtime_ns"].max()) / 1e9, UTC)  # type: ignore[arg-type]
        old = get_watermark(wh, cluster.name, SOURCE)
        if old is None or newest > old:
            set_watermark(wh, cluster.name, SOURCE, newest, {"dir": str(cfg.dir)})
    matched = rows.head(rows.height - corrected).filter(pl.col("reason").is_not_null()).height
    return IngestResult(
        source=SOURCE,
        cluster=cluster.name,
        accepted=rows.height - corrected + unchanged,
        refused=refused,
        written=written,
        note=f"{rows.height - corrected} log files read ({matched} with a failure signature), "
        f"{unchanged} unchanged" + (f", {corrected} attempts corrected" if corrected else ""),
    )


def run_logs(settings: Settings, cluster: ClusterConfig, options: RunOptions) -> IngestResult:
    """The configured log folder of `cluster` (its runner in `ingest.sources`)."""
    return ingest_logs(settings, cluster)
