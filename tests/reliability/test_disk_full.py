"""A write that fails (disk full, over quota, read-only) leaves every stored file whole, the
watermark unmoved, no temporary file behind, and ends in one sentence naming the disk and the
folder; the next run, with room again, completes to the uninterrupted result.

On a real disk: a tmpfs mounted for the test (root may mount one; where the mount is refused the
tests that need it are skipped, saying so) holds the data directory, and a ballast file fills it
at a chosen point of a real `gpuwaste ingest`, a first `gpuwaste analyze` and a second one; then
the same disk remounted read-only. In-process, against a real Prometheus: the parquet writer
raises ENOSPC mid-file, or `os.replace` raises EROFS, at the first write of the third window. A
data directory the process cannot create at all (under /sys) is tried for real.
"""

from __future__ import annotations

import errno
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pytest
from harness.prometheus import PrometheusServer

from gpuwaste.analyses.registry import PER_JOB_TABLES
from gpuwaste.analyses.run import _write_log
from gpuwaste.analyses.state import SAMPLE_TABLES
from gpuwaste.config import ClusterConfig, PrometheusSource, Settings
from gpuwaste.errors import DiskError, GpuwasteError
from gpuwaste.ingest.prometheus.source import ingest_prometheus, window_length
from gpuwaste.warehouse import store
from gpuwaste.warehouse.bookkeeping import get_watermark
from gpuwaste.warehouse.catalog import CATALOG_FILE, refresh_catalog
from gpuwaste.warehouse.disk import disk_errno
from gpuwaste.warehouse.results import RESULT_TABLES
from gpuwaste.warehouse.schema import FACT_TABLES
from gpuwaste.warehouse.store import TMP_MARK, Warehouse
from tests.reliability.faults import MAX_POINTS, assert_same, bounds, leftover_temp_files, snapshot

GPUWASTE = Path(sys.executable).with_name("gpuwaste")
ENOSPC = os.strerror(errno.ENOSPC)


def run(d: Path, url: str, *, until_windows: int | None = None) -> None:
    src = PrometheusSource(url=url, retries=1, max_points_per_query=MAX_POINTS)
    start, end = bounds()
    if until_windows is not None:
        end = start + until_windows * window_length(src)
    ingest_prometheus(
        Settings(data_dir=d),
        ClusterConfig(name="c1", prometheus=src),
        since=start,
        until=end,
        quiet=True,
    )


def files_bytes(d: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(d)): p.read_bytes() for p in sorted((d / "parquet").rglob("*.parquet"))
    }


def enospc_mid_write(real: Callable[..., Any]) -> Callable[..., Any]:
    def write_parquet_file(df: pl.DataFrame, file: Path, **kwargs: Any) -> None:
        real(df, file, **kwargs)
        with open(file, "rb+") as fh:  # the disk filled up half-way through the file
            fh.truncate(os.path.getsize(file) // 2)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(file))

    return write_parquet_file


def erofs_on_rename(real: Callable[..., Any]) -> Callable[..., Any]:
    def replace(src: Any, dst: Any, **kwargs: Any) -> None:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(dst))

    return replace


@pytest.mark.prometheus
@pytest.mark.parametrize(
    ("fault", "message"),
    [("disk full", "No space left on device"), ("read-only", "Read-only file system")],
)
def test_failed_write_keeps_the_previous_partition_and_watermark(
    served: PrometheusServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    fault: str,
    message: str,
) -> None:
    ref = tmp_path / "ref"
    run(ref, served.url)
    want = snapshot(ref)
    d = tmp_path / "wh"
    run(d, served.url, until_windows=2)
    before, wm_before = files_bytes(d), get_watermark(Warehouse(d), "c1", "prometheus")
    with monkeypatch.context() as m:
        if fault == "disk full":
            m.setattr(store, "write_parquet_file", enospc_mid_write(store.write_parquet_file))
        else:
            m.setattr(os, "replace", erofs_on_rename(os.replace))
        with pytest.raises(GpuwasteError) as err:
            run(d, served.url)
    text = str(err.value)
    assert message in text and "\n" not in text and "the disk holding" in text, text
    assert str(d) in text and "data.parquet was not written" in text  # names the file
    assert files_bytes(d) == before  # every partition as it was, byte for byte
    assert get_watermark(Warehouse(d), "c1", "prometheus") == wm_before
    assert not leftover_temp_files(d)
    run(d, served.url)  # space again: the run completes
    assert_same(snapshot(d), want, f"{fault}, then re-run")


def test_unwritable_data_directory_is_one_sentence(tmp_path: Path) -> None:
    exe = Path(sys.executable).parent / "gpuwaste"
    res = subprocess.run(
        [str(exe), "ingest", "prometheus", "--url", "http://127.0.0.1:1", "--cluster", "c1",
         "--data-dir", "/sys/gpuwaste-test-warehouse"],
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert res.returncode == 1
    assert res.stderr.startswith("gpuwaste: cannot write to the data directory"), res.stderr
    assert "Traceback" not in res.stderr


# ---------------------------------------------------------------- a real disk (a tmpfs) fills up


def gpuwaste(*args: str, data_dir: Path) -> subprocess.CompletedProcess[str]:
    """A real `gpuwaste` process on `data_dir` (quiet: stderr holds only what went wrong)."""
    command, *rest = args
    return subprocess.run(
        [str(GPUWASTE), command, "--data-dir", str(data_dir), "--quiet", *rest],
        capture_output=True,
        text=True,
        timeout=300,
    )


def ingest(data_dir: Path, source: str, gen: Path) -> subprocess.CompletedProcess[str]:
    files = {"slurm": gen / "sacct.txt", "openmetrics": gen / "metrics.om"}
    return gpuwaste("ingest", source, "--file", str(files[source]), "--cluster", "demo",
                    data_dir=data_dir)  # fmt: skip


def ok(res: subprocess.CompletedProcess[str]) -> None:
    assert res.returncode == 0, res.stderr


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small generated cluster (4 GPUs, 1 day: 51,760 samples, 30 jobs)."""
    gen = tmp_path_factory.mktemp("gen")
    ok(subprocess.run([str(GPUWASTE), "generate", "--out", str(gen), "--gpus", "4", "--days", "1"],
                      capture_output=True, text=True, timeout=300))  # fmt: skip
    return gen


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory, generated: Path) -> Path:
    """The warehouse of the same runs with room to spare."""
    ref = tmp_path_factory.mktemp("ref") / "wh"
    ok(ingest(ref, "slurm", generated))
    ok(ingest(ref, "openmetrics", generated))
    ok(gpuwaste("analyze", data_dir=ref))
    return ref


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 16 MiB tmpfs mounted for the test, unmounted after it whatever happens."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m,mode=0755", "tmpfs", str(mnt)],
                         capture_output=True, text=True)  # fmt: skip
    if res.returncode != 0:
        said = res.stderr.strip()
        if os.geteuid() != 0 or any(w in said.lower() for w in ("permission", "not permitted")):
            pytest.skip(f"this machine refuses to mount a tmpfs here ({said or 'not root'})")
        pytest.fail(f"mount -t tmpfs failed: {said}")
    try:
        yield mnt.resolve()
    finally:
        if subprocess.run(["umount", str(mnt)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], check=True)  # busy: detach it


def fill(disk: Path, leave: int) -> Path:
    """A ballast file that leaves `leave` bytes of `disk` free."""
    ballast = disk / "ballast"
    ballast.unlink(missing_ok=True)
    st = os.statvfs(disk)
    with open(ballast, "wb") as fh:
        os.posix_fallocate(fh.fileno(), 0, st.f_bavail * st.f_frsize - leave)
    return ballast


def stored(data_dir: Path) -> dict[str, bytes]:
    """Every file of the data directory but the lock files (which hold the last run's pid)."""
    return {
        str(p.relative_to(data_dir)): p.read_bytes()
        for p in sorted(data_dir.rglob("*"))
        if p.is_file() and not p.name.endswith(".lock")
    }


def size(data_dir: Path, tables: Iterable[str]) -> int:
    return sum(p.stat().st_size for t in tables for p in (data_dir / "parquet" / t).rglob("*"))


def said_once(res: subprocess.CompletedProcess[str], data_dir: Path, disk: Path) -> str:
    """The failed run's one sentence: exit 1, no traceback, one line on stderr naming the disk
    and a folder of the data directory; returns the folder."""
    assert res.returncode == 1, res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    found = re.search(rf"the disk holding (\S+) is full \({ENOSPC}; {disk}, tmpfs\): ", lines[0])
    assert found and found.group(1).startswith(str(data_dir)), lines[0]
    assert lines[0].startswith("gpuwaste: ") and lines[0].endswith(
        "; free space there and run again."
    )
    return found.group(1)


def whole(data_dir: Path, before: dict[str, bytes]) -> None:
    """No temporary file; every parquet file reads to its end; the catalog opens."""
    names = [p.name for p in data_dir.rglob("*")]
    assert not [n for n in names if TMP_MARK in n or n.endswith(".tmp")], names
    for p in data_dir.rglob("*.parquet"):
        pl.read_parquet(p)
    if (data_dir / CATALOG_FILE).exists():
        duckdb.connect(str(data_dir / CATALOG_FILE), read_only=True).close()


@pytest.mark.slow
def test_a_real_disk_fills_during_ingest_analyze_and_a_second_analyze(
    small_disk: Path, generated: Path, uninterrupted: Path
) -> None:
    """Each run stops at the full disk in one sentence naming it, leaves every stored file
    whole (the files the run had not replaced as they were, byte for byte), and one run after
    the ballast is gone gives the uninterrupted warehouse."""
    wh = small_disk / "wh"
    want = snapshot(uninterrupted)
    ok(ingest(wh, "slurm", generated))

    # ingest: room for about half the sample files
    before = stored(wh)
    ballast = fill(small_disk, size(uninterrupted, SAMPLE_TABLES) // 2)
    folder = said_once(ingest(wh, "openmetrics", generated), wh, small_disk)
    # the file is staged by day before any day is written (ingest/staging.py): the disk fills
    # there, or while a day file is written
    assert (
        "/.staging/openmetrics-" in folder
        or "/parquet/gpu_samples/" in folder
        or ("/parquet/host_samples/" in folder)
    )
    assert not list((wh / ".staging").glob("*")), "the run's staging folder is left behind"
    after = stored(wh)
    assert {k: after.get(k) for k in before} == before  # the jobs, their watermark, the catalog
    whole(wh, before)
    ballast.unlink()
    ok(ingest(wh, "openmetrics", generated))

    # a first analyze: room for about half the result files
    before = stored(wh)
    ballast = fill(small_disk, size(uninterrupted, RESULT_TABLES) // 2)
    said_once(gpuwaste("analyze", data_dir=wh), wh, small_disk)
    after = stored(wh)
    facts = [k for k in before if k.startswith("parquet/") and k.split("/")[1] in FACT_TABLES]
    assert {k: after[k] for k in facts} == {k: before[k] for k in facts}
    whole(wh, before)
    ballast.unlink()
    ok(gpuwaste("analyze", data_dir=wh))
    assert_same(snapshot(wh), want, "analyze after a full disk, then again")

    # a second analyze: room for about half of one batch's staged rows
    before = stored(wh)
    ballast = fill(small_disk, size(uninterrupted, PER_JOB_TABLES) // 2)
    folder = said_once(gpuwaste("analyze", "--rebuild", data_dir=wh), wh, small_disk)
    assert stored(wh) == before  # stopped while staging: every stored file as it was
    whole(wh, before)
    ballast.unlink()
    ok(gpuwaste("analyze", "--rebuild", data_dir=wh))
    assert_same(snapshot(wh), want, "a second analyze after a full disk, then again")


def test_a_read_only_disk_is_one_sentence(small_disk: Path, generated: Path) -> None:
    wh = small_disk / "wh"
    ok(ingest(wh, "slurm", generated))
    before = stored(wh)
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    res = ingest(wh, "slurm", generated)
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    assert res.stderr == (
        f"gpuwaste: the disk holding {wh} is read-only (Read-only file system; {small_disk}, "
        "tmpfs): nothing was written; make it writable and run again.\n"
    )
    assert stored(wh) == before


def test_the_error_log_on_a_full_disk_is_left_out(small_disk: Path) -> None:
    """A cluster's analysis that fails while the disk is full: its error log cannot be written,
    and the run says so instead of ending in the log's own OSError (issue #47)."""
    fill(small_disk, 0)
    assert _write_log(small_disk / "wh", "demo", ["Traceback ...\n" * 2000]) is None
    assert not (small_disk / "wh" / "analyze_state" / "demo.errors.log").exists()


def test_a_parquet_write_cut_anywhere_by_the_disk_names_it(small_disk: Path) -> None:
    """The disk fills at every 4 KiB of one file's write, its page headers and footer included:
    each failure is the one sentence, the old file stays whole. Polars says a failed write of a
    header or the footer only as 'File out of specification: Invalid thrift: transport error'
    (analyze's 'Invalid thrift' of issue #47, which no reader ever saw); the writer keeps the
    system's errno (`store.write_parquet_file`)."""
    dest = small_disk / "wh" / "t" / "x.parquet"
    old = pl.DataFrame({"a": [1]})
    store.atomic_write_parquet(old, dest)
    new = pl.DataFrame({f"c{j}": [f"v{i}-{j}" for i in range(500)] for j in range(60)})
    causes: set[str] = set()
    for leave in range(0, 64 << 10, 4 << 10):
        fill(small_disk, leave)
        try:
            store.atomic_write_parquet(new, dest)
        except DiskError as exc:
            assert str(exc) == (
                f"the disk holding {dest.parent} is full ({ENOSPC}; {small_disk}, tmpfs): "
                "x.parquet was not written and every stored file is whole; free space there and "
                "run again."
            )
            assert pl.read_parquet(dest).equals(old)
            causes.add(str(exc.__cause__.__cause__))  # the OSError, from polars' error
        else:
            assert pl.read_parquet(dest).equals(new)
            break
        assert os.listdir(dest.parent) == ["x.parquet"]
    else:
        pytest.fail("64 KiB were not enough to write the file")
    assert causes and any("Invalid thrift" in c for c in causes), causes


def test_duckdb_writes_on_a_full_disk_name_it(small_disk: Path, generated: Path) -> None:
    """DuckDB says a full disk only in its message: a COPY to parquet (plan, staging, commit,
    analyze state) and the catalog file (its WAL at the commit) give the same sentence, and the
    old file stays."""
    wh = small_disk / "wh"
    ok(ingest(wh, "slurm", generated))
    catalog = (wh / CATALOG_FILE).read_bytes()
    dest = wh / "t" / "copy.parquet"
    fills: list[str] = []
    for leave in (0, 8 << 10, 64 << 10, 512 << 10):
        fill(small_disk, leave)
        try:
            with duckdb.connect() as con:
                store.atomic_copy_parquet(
                    con, "select range, range::varchar from range(100000)", dest
                )
        except DiskError as exc:
            fills.append(str(exc))
            assert not dest.exists()
            assert str(exc).startswith(f"the disk holding {dest.parent} is full ({ENOSPC}; ")
        try:
            refresh_catalog(wh, force=True)
        except DiskError as exc:
            fills.append(str(exc))
            assert (wh / CATALOG_FILE).read_bytes() == catalog
            assert str(exc) == (
                f"the disk holding {wh} is full ({ENOSPC}; {small_disk}, tmpfs): {CATALOG_FILE} "
                "was not written and its views are as they were; free space there and run again."
            )
        assert not [p for p in wh.rglob("*") if ".tmp" in p.name]
    assert len(fills) >= 3, fills  # the copy at least twice, the catalog at least once


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (OSError(errno.EDQUOT, os.strerror(errno.EDQUOT)), errno.EDQUOT),
        (OSError("No space left on device (os error 28)"), errno.ENOSPC),  # polars' write_ipc
        (duckdb.IOException('IO Error: Could not write file "/d/a.parquet": Disk quota exceeded'),
         errno.EDQUOT),
        (duckdb.IOException('IO Error: Async write failed: {"exception_type":"IO","errno":"30"}'),
         errno.EROFS),
        (pl.exceptions.ComputeError("parquet: underlying IO error: Read-only file system (os "
                                    "error 30)"), errno.EROFS),
        (duckdb.IOException('IO Error: Could not read file "/d/No space left on device.parquet"'),
         None),  # the words in a path are not the system's answer
        (GpuwasteError("a record said: No space left on device"), None),  # not DuckDB's, polars'
        (duckdb.IOException('IO Error: Could not write file "/d/a.parquet": Permission denied'),
         None),
        (OSError(errno.EACCES, os.strerror(errno.EACCES)), None),
    ],
)  # fmt: skip
def test_the_disk_errno_is_found_in_each_library_s_words(error: Exception, code: int) -> None:
    """Quotas cannot be made on a tmpfs: the forms each library gives them (and ENOSPC, EROFS)
    are read from the message, and nothing else is taken for a disk's refusal."""
    assert disk_errno(error) == code
    try:
        try:
            raise error
        except Exception as inner:
            raise GpuwasteError("wrapped") from inner
    except GpuwasteError as outer:
        assert disk_errno(outer) == code  # found in the chain


def test_a_configured_ingest_stops_at_the_full_disk(small_disk: Path, generated: Path) -> None:
    """`gpuwaste ingest` over its configured sources stops at the first that meets the full
    disk (every source after it would meet it too): one sentence, not one per source."""
    wh = small_disk / "wh"
    cfg = small_disk.parent / "gpuwaste.toml"
    cfg.write_text(
        f'data_dir = "{wh}"\n\n[[clusters]]\nname = "demo"\n\n'
        f'[clusters.openmetrics]\nfile = "{generated / "metrics.om"}"\n\n'
        f'[clusters.slurm]\nfile = "{generated / "sacct.txt"}"\n'
    )
    wh.mkdir()
    fill(small_disk, 8 << 10)
    res = subprocess.run([str(GPUWASTE), "ingest", "--config", str(cfg), "--quiet"],
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert res.returncode == 1 and "Traceback" not in res.stderr, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("gpuwaste: ingest stopped at demo/"), lines[0]
    assert f"is full ({ENOSPC}; {small_disk}, tmpfs): " in lines[0]
