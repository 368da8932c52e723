"""A write that fails (disk full, read-only data directory) leaves the previous partition intact,
the watermark unmoved, no temporary file behind, and ends in one clear sentence.

As root (the CI container) `chmod` does not stop a write and no tmpfs can be mounted, so the
failures are made in-process: the parquet writer raises ENOSPC mid-file, or `os.replace` raises
EROFS, at the first write of the third window. A data directory the process cannot create at
all (under /sys) is tried for real.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from gpuwaste.config import ClusterConfig, PrometheusSource, Settings
from gpuwaste.errors import GpuwasteError
from gpuwaste.ingest.prometheus.source import ingest_prometheus, window_length
from gpuwaste.warehouse import store
from gpuwaste.warehouse.bookkeeping import get_watermark
from gpuwaste.warehouse.store import Warehouse
from tests.reliability.faults import MAX_POINTS, assert_same, bounds, leftover_temp_files, snapshot
from tests.support.prometheus import PrometheusServer

pytestmark = [pytest.mark.prometheus]


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
