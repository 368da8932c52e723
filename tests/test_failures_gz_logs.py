"""Compressed job logs (`slurm-123.out.gz`): read from their tail as a stream, incrementally like
plain files, and a gzip bomb quarantined with its reason while the other files are read.
Hand-built files of a few MiB at most."""

from __future__ import annotations

import gzip
import os
import tracemalloc
from pathlib import Path

from gpuwaste.config import ClusterConfig, FileLimits, LogsSource, Settings
from gpuwaste.ingest.files import read_tail
from gpuwaste.ingest.logs.source import ingest_logs
from gpuwaste.warehouse.store import Warehouse

OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"


def _settings(tmp_path: Path, logs: Path, ratio: float = 200.0, tail_mib: float = 4.0) -> Settings:
    return Settings(
        data_dir=tmp_path / "wh",
        clusters=[ClusterConfig(name="c", logs=LogsSource(dir=logs, tail_mib=tail_mib))],
        files=FileLimits(max_gzip_ratio=ratio),
    )


def _rows(s: Settings) -> dict[str, dict[str, object]]:
    return {r["path"]: r for r in Warehouse(s.data_dir).read("job_logs", "c").iter_rows(named=True)}


def test_a_gz_log_is_read_by_the_default_pattern_and_incrementally(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "slurm-123.out.gz").write_bytes(gzip.compress(f"epoch 1\n{OOM}\n".encode()))
    (logs / "slurm-7_2.err.gz").write_bytes(gzip.compress(b"Segmentation fault (core dumped)"))
    (logs / "notes.txt.gz").write_bytes(gzip.compress(b"x"))
    s = _settings(tmp_path, logs)
    first = ingest_logs(s, s.clusters[0])
    assert [r.location for r in first.refused] == ["notes.txt.gz"]
    rows = _rows(s)
    assert {p: (r["job_key"], r["attempt"], r["reason"]) for p, r in rows.items()} == {
        "slurm-123.out.gz": ("123", None, "GPU OOM"),
        "slurm-7_2.err.gz": ("7_2", None, "core dump"),
    }
    assert rows["slurm-123.out.gz"]["line"] == OOM and rows["slurm-123.out.gz"]["line_no"] == 2
    again = ingest_logs(s, s.clusters[0])
    assert again.written["job_logs"] == 0 and "2 unchanged" in again.note
    # rewritten (a longer run compressed again): read again, its row replaced
    (logs / "slurm-7_2.err.gz").write_bytes(
        gzip.compress(b"Segmentation fault (core dumped)\nNCCL error in: x.cpp:42\n")
    )
    os.utime(logs / "slurm-7_2.err.gz", ns=(1, 2))  # a new mtime whatever the clock's grain
    grown = ingest_logs(s, s.clusters[0])
    assert grown.written["job_logs"] == 1 and len(_rows(s)) == 2
    assert _rows(s)["slurm-7_2.err.gz"]["reason"] == "MPI error"


def test_a_large_gz_log_keeps_only_its_tail_in_memory(tmp_path: Path) -> None:
    """64 MiB of text in a small .gz: the stream keeps about twice the 1 MiB tail, never the
    text; the first, partial line of the tail is dropped."""
    path = tmp_path / "slurm-5.out.gz"
    line = b"step 000123 loss 0.4321 lr 0.0001 throughput 812.5 samples/s\n"
    body = line * ((64 << 20) // len(line))
    path.write_bytes(gzip.compress(body + OOM.encode() + b"\n", compresslevel=1))
    limits = FileLimits(max_gzip_ratio=10_000)
    tracemalloc.start()
    data, whole = read_tail(path, "job log", limits, 1 << 20)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert not whole and len(data) == 1 << 20 and data.endswith(OOM.encode() + b"\n")
    assert peak < 8 << 20  # bytes: the tail, its trimmed copy and one 1 MiB read


def test_a_gzip_bomb_is_quarantined_and_the_other_logs_are_read(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    bomb = gzip.compress(b"\0" * (32 << 20), compresslevel=9)  # ~32 KiB inflating 1000 times
    (logs / "slurm-1.out.gz").write_bytes(bomb)
    (logs / "slurm-2.out").write_text(f"{OOM}\n")
    broken = gzip.compress(f"{OOM}\n".encode() * 1000)
    (logs / "slurm-3.out.gz").write_bytes(broken[: len(broken) // 2])  # cut while compressing
    s = _settings(tmp_path, logs)
    result = ingest_logs(s, s.clusters[0])
    reasons = {r.location: r.reason for r in result.refused}
    assert set(reasons) == {"slurm-1.out.gz", "slurm-3.out.gz"}
    assert reasons["slurm-1.out.gz"] == (
        f"decompresses to more than {200 * len(bomb):,} bytes of text (200 times its "
        f"{len(bomb):,} bytes, [files] max_gzip_ratio = 200): refused as a likely gzip bomb"
    )
    assert reasons["slurm-3.out.gz"].startswith("could not be read: ")
    assert list(_rows(s)) == ["slurm-2.out"]
