"""A day of samples cut by hosts (`warehouse.host_blocks`): which file holds which hosts, how a
write keeps every row in exactly one block, and that an analyze over blocks computes the same
tables while a batch names only its hosts' blocks."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pytest

from gpuwaste.analyses import per_job, read_ahead, run
from gpuwaste.analyses.run import analyze
from gpuwaste.config import Settings
from gpuwaste.warehouse import store
from gpuwaste.warehouse.host_blocks import (
    block_index,
    blocks_holding,
    boundary_of,
    cut_of,
    file_name,
    new_boundaries,
)
from gpuwaste.warehouse.store import Warehouse
from tests.support.generated_warehouse import six_hosts, write_generated
from tests.support.per_job_tables import per_job_tables

T0 = datetime(2026, 11, 2, tzinfo=UTC)
HOSTS = ["h0", "h1", "h2", "h3", "h4"]


def _rows(hosts: list[str], start: datetime, n: int, util: float = 50.0) -> pl.DataFrame:
    return pl.DataFrame(
        [
            {
                "host": h,
                "gpu": 0,
                "ts": start + timedelta(minutes=i),
                "util": util,
                "mem_used_mib": 1.0,
                "mem_total_mib": 80.0,
                "source": "test",
            }
            for h in hosts
            for i in range(n)
        ]
    )


def _blocks(wh: Warehouse, day: str = "2026-11-02") -> dict[str, list[str]]:
    """File name -> sorted distinct hosts, for every file of the day."""
    folder = wh.cluster_dir("gpu_samples", "c") / f"date={day}"
    return {
        p.name: sorted(pl.read_parquet(p)["host"].unique().to_list())
        for p in sorted(folder.glob("*.parquet"))
    }


@pytest.mark.parametrize(
    "host",
    [
        "node-0017",
        "a/b c",
        "gpu\u00fc.example.org",
        "x" * 300,
        "%2F",
        "hosts-from-x",
        "n.parquet.b",
    ],
)
def test_a_block_file_name_gives_back_its_first_host(host: str) -> None:
    _, boundary = new_boundaries(["\x01", host], block_hosts=1)
    name = file_name(boundary)
    temporary = f"{name}{store.TMP_MARK}{'0' * 32}"  # the name a block is written through
    assert "/" not in name and len(temporary.encode()) <= 255
    assert boundary_of(name) == boundary
    assert cut_of(name) == boundary
    assert cut_of(f"{name}.damaged") == boundary
    assert boundary <= host  # a prefix at most: still a lower bound of the block's hosts


def test_blocks_by_hand() -> None:
    assert new_boundaries(HOSTS, block_hosts=2) == ["", "h2", "h4"]
    assert new_boundaries(HOSTS, block_hosts=5) == [""]
    assert new_boundaries(["b", "a"], block_hosts=128) == [""]
    bounds = ["", "h2", "h4"]
    assert [block_index(bounds, h) for h in ["a", "h0", "h2", "h3zz", "h4", "z"]] == [
        0,
        0,
        1,
        1,
        2,
        2,
    ]
    assert blocks_holding(bounds, ["h3"]) == {1}
    assert blocks_holding(bounds, ["h1", "z"]) == {0, 2}
    assert boundary_of("data.parquet") == ""
    assert boundary_of("part-0.parquet") is None
    assert boundary_of("hosts-from-.parquet") is None
    # two long names that share their first 120 characters start one block, not two
    long = ["y" * 250 + "1", "y" * 250 + "2"]
    assert new_boundaries(["a", *long], block_hosts=1) == ["", "y" * 120]
    # a name gpuwaste would not have written is no block (a write would go to another file)
    assert boundary_of("hosts-from-a%2fb.parquet") is None
    assert boundary_of("hosts-from-a%2Fb.parquet") == "a/b"
    assert cut_of("hosts-from-h2.parquet.damaged") == "h2"
    assert cut_of("data.parquet.damaged") == ""
    assert cut_of("notes.txt") is None
    with pytest.raises(ValueError):
        new_boundaries(HOSTS, block_hosts=0)


def test_a_day_is_cut_into_blocks_that_never_move(tmp_path: Path) -> None:
    wh = Warehouse(tmp_path, block_hosts=2)
    hour = T0 + timedelta(hours=1)
    assert wh.replace_window("gpu_samples", "c", T0, hour, _rows(HOSTS, T0, 60)) == 300
    expected = {
        "data.parquet": ["h0", "h1"],
        "hosts-from-h2.parquet": ["h2", "h3"],
        "hosts-from-h4.parquet": ["h4"],
    }
    assert _blocks(wh) == expected
    # the same window again: the same rows, once
    wh.replace_window("gpu_samples", "c", T0, hour, _rows(HOSTS, T0, 60))
    assert wh.read("gpu_samples", "c").height == 300
    # a later window with hosts the day did not have: into the block whose range holds them,
    # however many they are (the blocks were set when the day was first written)
    later = ["a0", "h1b", "h3a", "h3b", "h3c", "zz"]
    wh.replace_window("gpu_samples", "c", hour, hour + timedelta(hours=1), _rows(later, hour, 60))
    assert _blocks(wh) == {
        "data.parquet": ["a0", "h0", "h1", "h1b"],
        "hosts-from-h2.parquet": ["h2", "h3", "h3a", "h3b", "h3c"],
        "hosts-from-h4.parquet": ["h4", "zz"],
    }
    stored = wh.read("gpu_samples", "c")
    assert stored.height == 660
    assert stored.unique(["host", "gpu", "ts"]).height == 660
    # a new day is cut from its own hosts
    day2 = T0 + timedelta(days=1)
    wh.replace_window(
        "gpu_samples", "c", day2, day2 + timedelta(hours=1), _rows(HOSTS[:3], day2, 5)
    )
    assert _blocks(wh, "2026-11-03") == {
        "data.parquet": ["h0", "h1"],
        "hosts-from-h2.parquet": ["h2"],
    }
    # a window replaced with fewer rows drops them from every block
    wh.replace_window("gpu_samples", "c", T0, hour, _rows(["h3"], T0, 60, util=7.0))
    day1 = wh.read("gpu_samples", "c").filter(pl.col("ts") < hour)
    assert day1["host"].unique().to_list() == ["h3"] and day1["util"].unique().to_list() == [7.0]


def test_a_first_write_cut_short_keeps_its_cut(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wh = Warehouse(tmp_path, block_hosts=2)
    hour = T0 + timedelta(hours=1)
    write = store.atomic_write_parquet

    def fails_on_the_first_block(df: pl.DataFrame, dest: Path) -> None:
        if dest.name == "data.parquet":
            raise store.WarehouseError(f"could not write {dest}: No space left on device.")
        write(df, dest)

    monkeypatch.setattr(store, "atomic_write_parquet", fails_on_the_first_block)
    with pytest.raises(store.WarehouseError):
        wh.replace_window("gpu_samples", "c", T0, hour, _rows(HOSTS, T0, 60))
    assert sorted(_blocks(wh)) == ["hosts-from-h2.parquet", "hosts-from-h4.parquet"]
    monkeypatch.setattr(store, "atomic_write_parquet", write)
    wh.replace_window("gpu_samples", "c", T0, hour, _rows(HOSTS, T0, 60))  # the re-run
    assert _blocks(wh) == {
        "data.parquet": ["h0", "h1"],
        "hosts-from-h2.parquet": ["h2", "h3"],
        "hosts-from-h4.parquet": ["h4"],
    }
    assert wh.read("gpu_samples", "c").height == 300


def test_a_block_moved_aside_and_restored_holds_its_hosts_alone(tmp_path: Path) -> None:
    """A damaged block moved aside (as the damaged-file message says): its hosts are in no
    file, a write in the meantime recreates the block, and the backup restored over it leaves
    no host's rows in two files."""
    wh = Warehouse(tmp_path, block_hosts=2)
    hour = T0 + timedelta(hours=1)
    wh.replace_window("gpu_samples", "c", T0, hour, _rows(HOSTS, T0, 60))
    folder = wh.cluster_dir("gpu_samples", "c") / "date=2026-11-02"
    block = folder / "hosts-from-h2.parquet"
    backup = tmp_path / "backup.parquet"
    backup.write_bytes(block.read_bytes())
    block.rename(block.with_name(block.name + ".damaged"))
    day = T0.date()
    assert wh.day_files("gpu_samples", "c", day, day, ["h3"]) == []
    assert sorted(wh.read("gpu_samples", "c")["host"].unique()) == ["h0", "h1", "h4"]
    wh.replace_window("gpu_samples", "c", hour, hour + timedelta(hours=1), _rows(HOSTS, hour, 5))
    assert _blocks(wh)["hosts-from-h2.parquet"] == ["h2", "h3"]
    assert _blocks(wh)["data.parquet"] == ["h0", "h1"]
    backup.replace(block)  # the operator restores the backup over the recreated block
    stored = wh.read("gpu_samples", "c")
    # h0, h1, h4: 65 rows each; h2, h3: the backup's 60 each (the later 5 it replaced)
    assert stored.height == 3 * 65 + 2 * 60
    assert stored.unique(["host", "gpu", "ts"]).height == stored.height


def test_day_files_of_hosts_are_the_blocks_that_hold_them(tmp_path: Path) -> None:
    wh = Warehouse(tmp_path, block_hosts=2)
    wh.replace_window("gpu_samples", "c", T0, T0 + timedelta(days=2), _rows(HOSTS, T0, 3))
    day = T0.date()
    folder = wh.cluster_dir("gpu_samples", "c") / "date=2026-11-02"
    first, second, third = (
        folder / n for n in ("data.parquet", "hosts-from-h2.parquet", "hosts-from-h4.parquet")
    )
    assert wh.day_files("gpu_samples", "c", day, day) == [first, second, third]
    assert wh.day_files("gpu_samples", "c", day, day, ["h3"]) == [second]
    assert wh.day_files("gpu_samples", "c", day, day, ["h0", "h9"]) == [first, third]
    assert wh.day_files("gpu_samples", "c", day, day, []) == []
    # the first block moved aside (a damaged file): its hosts are in no file, not in the next
    first.rename(first.with_name("data.parquet.damaged"))
    assert wh.day_files("gpu_samples", "c", day, day, ["h1"]) == []
    assert wh.day_files("gpu_samples", "c", day, day, ["h1", "h2"]) == [second]


def _named_files(con: duckdb.DuckDBPyConnection, view: str) -> int:
    """How many files the view `view` on `con` names."""
    sql = con.sql("select sql from duckdb_views() where view_name = $1", params=[view])
    return str(sql.fetchall()[0][0]).count(".parquet'")


def test_analyze_over_blocks_gives_the_same_tables_and_a_batch_names_its_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Six hosts, written once as one file a day and once in blocks of two hosts (GPU samples
    naming models, and host samples); batches of two hosts' jobs, host ranges of one host.
    Every per-job table is the same, row for row; a batch's views name only the blocks of the
    hosts its allocations reach, and a host range reads only its host's blocks."""
    spec = six_hosts(5, interval_s=60)
    plain = write_generated(spec, tmp_path / "plain", labelled=True)
    blocked = write_generated(spec, tmp_path / "blocked", block_hosts=2, labelled=True)
    for name in ("gpu_samples", "host_samples"):
        assert len(Warehouse(blocked).files(name)) == 3 * len(Warehouse(plain).files(name))
    monkeypatch.setattr(run, "BATCH_MAX_HOSTS", 2)
    named: list[tuple[str, int, int, int]] = []  # data dir, files named, of them, all files
    narrow = per_job.narrow_dated_views

    def spy(*args: Any) -> None:  # as run_batch calls it: every argument by position
        narrow(*args)
        con, data_dir, cluster, first, last, hosts = args
        wh = Warehouse(data_dir)
        for view in ("gpu_samples", "host_samples"):
            wanted = len(wh.day_files(view, cluster, first, last, hosts))
            every = len(wh.day_files(view, cluster, first, last))
            named.append((str(data_dir), _named_files(con, view), wanted, every))

    ranges: list[tuple[int, int]] = []  # a range's files named, the blocks of its hosts
    read = read_ahead.job_samples.read

    def range_spy(
        con: duckdb.DuckDBPyConnection,
        alloc: pl.DataFrame,
        source: str = "gpu_samples",
        readings: Sequence[str] = read_ahead.job_samples.PASSED_ON,
    ) -> pl.DataFrame:
        span = read_ahead.date_span(alloc)
        if span is not None and str(blocked) in source:
            hosts = alloc["host"].unique().to_list()
            blocks = Warehouse(blocked).day_files("gpu_samples", "c", *span, hosts)
            ranges.append((source.count(".parquet'"), len(blocks)))
        return read(con, alloc, source, readings)

    monkeypatch.setattr(per_job, "narrow_dated_views", spy)
    monkeypatch.setattr(read_ahead.job_samples, "read", range_spy)
    analyze(Settings(data_dir=plain), quiet=True)
    analyze(Settings(data_dir=blocked), quiet=True, batch_hosts=1)  # host ranges of one host
    a, b = per_job_tables(plain), per_job_tables(blocked)
    assert a["job_usage"].height > 20
    assert a["job_usage"]["cpu_util_mean"].is_not_null().sum() > 20  # host samples were read
    assert set(a["job_gpu_usage"]["gpu_model"].drop_nulls()) == {"NVIDIA A100", "NVIDIA H100"}
    for name, frame in a.items():
        assert frame.equals(b[name]), name
    in_blocks = [n for n in named if n[0] == str(blocked)]
    assert in_blocks and all(files == wanted for _, files, wanted, _ in in_blocks)
    assert any(files < every for _, files, _, every in in_blocks)  # some batch left blocks out
    # each host range read the blocks of its own hosts, fewer than its batch's views name
    assert ranges and all(files == blocks for files, blocks in ranges)
    assert max(files for files, _ in ranges) < max(wanted for _, _, wanted, _ in in_blocks)
