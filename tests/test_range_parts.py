"""A batch's host-range parts kept on disk past a bound (`gpuwaste/analyses/range_parts.py`):
what is written and when, the frames read back in order with their types, the folder removed on
an error too, and the same per-job tables whether the parts stay in memory or all go to disk."""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
import tempfile
from contextlib import closing
from pathlib import Path

import polars as pl
import pytest

from gpuwaste.analyses import range_parts
from gpuwaste.analyses.batch import run_isolating
from gpuwaste.analyses.per_job import BatchResult
from gpuwaste.analyses.range_parts import RangeParts
from gpuwaste.analyses.run import analyze
from gpuwaste.config import Settings
from gpuwaste.errors import DamagedFileError, DiskError, GpuwasteError, MachineError
from gpuwaste.warehouse.disk import disk_of
from tests.support.generated_warehouse import six_hosts, write_generated
from tests.support.per_job_tables import per_job_tables


@pytest.fixture
def tmpdir_(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The system's temporary directory, for these tests: a folder of their own."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def _range(i: int) -> dict[str, pl.DataFrame]:
    """One host range's parts: 1,000 GPU rows (8 bytes a value: 16,000 bytes) and one count,
    whose column is of type Null (all nulls, no type given) in the first range."""
    counts = {"job_id": [f"j{i}"], "n": [None if i == 0 else i]}
    return {
        "gpus": pl.DataFrame({"gpu": range(i * 1000, i * 1000 + 1000), "busy_s": [1.5] * 1000}),
        "counts": pl.DataFrame(counts),
    }


def test_under_the_bound_nothing_is_written(tmpdir_: Path) -> None:
    with closing(RangeParts(limit=1 << 20)) as parts:
        for i in range(3):
            parts.add(_range(i))
        read = parts.read()
        assert list(tmpdir_.iterdir()) == []
    assert [df["gpu"][0] for df in read["gpus"]] == [0, 1000, 2000]


def test_past_the_bound_parts_go_to_disk_and_come_back_in_order(tmpdir_: Path) -> None:
    """A bound of 40,000 bytes: the first two ranges (2 x 16,000 and the counts) stay in memory,
    the third passes the bound, so all three are written to one file per part; the fourth stays
    in memory. Read back: 4,000 GPU rows in the order added, the counts with their types."""
    with closing(RangeParts(limit=40_000)) as parts:
        for i in range(2):
            parts.add(_range(i))
        assert list(tmpdir_.iterdir()) == []
        parts.add(_range(2))
        (folder,) = tmpdir_.iterdir()
        assert folder.name.startswith("gpuwaste-parts-")
        assert sorted(p.name for p in folder.iterdir()) == [
            "counts-00000.arrow",
            "gpus-00000.arrow",
        ]
        parts.add(_range(3))
        read = parts.read()
    assert list(tmpdir_.iterdir()) == []  # removed at the end
    gpus = pl.concat(read["gpus"])
    assert gpus["gpu"].to_list() == list(range(4000))
    assert _range(0)["counts"].schema["n"] == pl.Null
    counts = pl.concat(read["counts"], how="vertical_relaxed")
    assert counts.schema == pl.Schema({"job_id": pl.String, "n": pl.Int64})
    assert counts.rows() == [("j0", None), ("j1", 1), ("j2", 2), ("j3", 3)]


def test_the_folder_is_removed_on_an_error(tmpdir_: Path) -> None:
    with pytest.raises(RuntimeError), closing(RangeParts(limit=0)) as parts:
        parts.add(_range(0))
        assert len(list(tmpdir_.iterdir())) == 1
        raise RuntimeError("a step failed")
    assert list(tmpdir_.iterdir()) == []


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_generated(six_hosts(5), tmp_path_factory.mktemp("parts"))


def test_the_tables_are_the_same_with_every_part_on_disk(
    generated: Path, tmpdir_: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ranges of one host each (at most 20,000 samples: test_host_ranges.py), their parts held
    in memory (the bound far above them) or written after every range (a bound of 0 bytes): the
    same per-job tables, row for row; no folder is left."""
    writes: list[int] = []
    write = RangeParts._write

    def counted(self: RangeParts) -> None:
        writes.append(1)
        write(self)

    monkeypatch.setattr(RangeParts, "_write", counted)
    monkeypatch.setattr(range_parts, "PARTS_IN_MEMORY", 1 << 40)
    analyze(Settings(data_dir=generated), rebuild=True, quiet=True, range_samples=20_000)
    held = per_job_tables(generated)
    assert writes == []
    monkeypatch.setattr(range_parts, "PARTS_IN_MEMORY", 0)
    analyze(Settings(data_dir=generated), rebuild=True, quiet=True, range_samples=20_000)
    assert len(writes) >= 6  # every range written
    assert list(tmpdir_.glob("gpuwaste-parts-*")) == []
    assert held["job_usage"].height > 50
    for name, frame in per_job_tables(generated).items():
        assert frame.equals(held[name]), name


def test_a_full_disk_fails_the_batch_at_once_in_one_sentence(
    generated: Path,
    tmpdir_: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The disk is full when the batch writes its parts (the bound set to 0): the batch fails
    as a whole at its first write (its jobs are not tried apart, which would write again),
    analyze stops with one sentence naming the folder and its disk (every other cluster would
    meet the same disk), no folder is left, and the tables stay as they were."""
    analyze(Settings(data_dir=generated), rebuild=True, quiet=True)
    before = per_job_tables(generated)
    writes: list[int] = []

    def full(self: pl.DataFrame, file: object, **kwargs: object) -> None:
        writes.append(1)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(file))

    monkeypatch.setattr(pl.DataFrame, "write_ipc", full)
    monkeypatch.setattr(range_parts, "PARTS_IN_MEMORY", 0)
    with pytest.raises(DiskError, match=r"^analyze stopped at cluster c ") as err:
        analyze(Settings(data_dir=generated), rebuild=True, quiet=True)
    said = str(err.value)
    assert f"cannot write a batch's intermediate results in {tmpdir_}" in said
    assert (
        f"(the temporary folder, TMPDIR, on {disk_of(tmpdir_)}): No space left on device; "
        "point TMPDIR at"
    ) in said
    assert capsys.readouterr().err == ""
    assert writes == [1]  # one batch here, one write
    assert list(tmpdir_.iterdir()) == []
    for name, frame in per_job_tables(generated).items():
        assert frame.equals(before[name]), name


def test_no_usable_temporary_folder_is_said_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The temporary folder Python settled on is no folder (it checks one only once per process):
    the sentence names it."""
    not_a_folder = tmp_path / "not-a-folder"
    not_a_folder.write_text("")
    monkeypatch.setattr(tempfile, "tempdir", str(not_a_folder))
    with pytest.raises(MachineError, match=f"in {not_a_folder} .*: Not a directory"):
        RangeParts(limit=0).add(_range(0))


@pytest.mark.parametrize(
    "error",
    [MachineError("the disk is full."), DamagedFileError("a day file is damaged.")],
    ids=["machine", "damaged file"],
)
def test_a_machine_error_is_not_tried_job_by_job(error: GpuwasteError) -> None:
    """run_isolating runs the batch once and raises; no job is counted as failed (a damaged
    day file would fail every job of its days just the same)."""
    calls: list[list[str]] = []

    def run(ids: list[str]) -> BatchResult:
        calls.append(ids)
        raise error

    failed: dict[str, str] = {}
    with pytest.raises(type(error)):
        run_isolating(run, ["a", "b", "c", "d"], failed, [])
    assert calls == [["a", "b", "c", "d"]] and failed == {}


def test_folders_of_killed_processes_are_removed_by_the_next_batch(tmpdir_: Path) -> None:
    """A folder left by a process of this host that is gone goes when a batch makes its own;
    those of live processes, of other hosts (one whose name starts with this host's) and of
    other programs stay."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    host = socket.gethostname()
    left = tmpdir_ / f"{range_parts.PREFIX}{host}-{gone.pid}-x1"
    live = tmpdir_ / f"{range_parts.PREFIX}{host}-{os.getppid()}-x2"
    other_host = tmpdir_ / f"{range_parts.PREFIX}elsewhere-{gone.pid}-x3"
    longer_name = (
        tmpdir_ / f"{range_parts.PREFIX}{host}-{gone.pid}-{gone.pid}-x4"
    )  # host "<host>-<pid>"
    other = tmpdir_ / "not-ours"
    for folder in (left, live, other_host, longer_name, other):
        folder.mkdir()
        (folder / "gpus-00000.arrow").write_bytes(b"")
    with closing(RangeParts(limit=0)) as parts:
        parts.add(_range(0))
        kept = sorted(p.name for p in tmpdir_.iterdir())
    mine = f"{range_parts.PREFIX}{host}-{os.getpid()}-"
    assert [k for k in kept if not k.startswith(mine)] == sorted(
        [live.name, other_host.name, longer_name.name, other.name]
    )
    assert sum(k.startswith(mine) for k in kept) == 1
