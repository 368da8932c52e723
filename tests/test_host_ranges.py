"""Host ranges cut by the samples they read (`gpuwaste/analyses/host_ranges.py`): hand-computed
costs and cuts, the bound on a generated cluster, and the same per-job tables whatever the cut."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import polars as pl
import pytest

from gpuwaste.analyses import read_ahead
from gpuwaste.analyses.host_ranges import RANGE_MAX_SAMPLES, HostRanges, host_costs
from gpuwaste.analyses.run import analyze
from gpuwaste.config import Settings
from gpuwaste.warehouse.footers import Footers
from tests.support.generated_warehouse import six_hosts, write_generated
from tests.support.per_job_tables import per_job_tables

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def _alloc(rows: list[tuple[str, int, int | None, int, int]]) -> pl.DataFrame:
    """Allocations (host, gpu, gpu_instance, start hour, end hour)."""
    return pl.DataFrame(
        [(h, g, i, T0 + timedelta(hours=s), T0 + timedelta(hours=e)) for h, g, i, s, e in rows],
        schema={
            "host": pl.String,
            "gpu": pl.Int64,
            "gpu_instance": pl.Int64,
            "start_ts": pl.Datetime("us", "UTC"),
            "end_ts": pl.Datetime("us", "UTC"),
        },
        orient="row",
    )


def test_a_host_costs_its_devices_times_the_span_of_its_allocations() -> None:
    """Host b: two GPUs from hour 0 to hour 2 (the same GPU twice counts once); host a: two MIG
    instances of GPU 0 and the whole GPU 1 over one hour, and an unknown GPU (-1) over five,
    which reads nothing, so it neither counts as a device nor widens the span; host c: only an
    unknown GPU."""
    alloc = _alloc(
        [
            ("b", 0, None, 0, 1),
            ("b", 0, None, 1, 2),
            ("b", 1, None, 0, 2),
            ("a", 0, 1, 3, 4),
            ("a", 0, 2, 3, 4),
            ("a", 1, None, 3, 4),
            ("a", -1, None, 0, 5),
            ("c", -1, None, 0, 5),
        ]
    )
    costs = host_costs(alloc)
    assert costs["host"].to_list() == ["a", "b", "c"]
    assert costs["cost"].to_list() == [3 * 3600.0, 2 * 7200.0, 0.0]


def test_ranges_are_cut_by_the_samples_foreseen_from_those_read() -> None:
    """Five hosts of cost 10, at most 25 samples: nothing read yet, one host; 10 samples for a
    cost of 10 foresee 10 per host, so two hosts (a third would make 30); then 50 samples for
    a cost of 30 foresee 16.7 per host, so one host at a time."""
    ranges = HostRanges(["h1", "h2", "h3", "h4", "h5"], [10.0] * 5, max_hosts=8, max_samples=25)
    assert ranges.next() == ("h1", "h1")
    ranges.read(("h1", "h1"), 10)
    assert ranges.next() == ("h2", "h3")
    ranges.read(("h2", "h3"), 40)
    assert ranges.next() == ("h4", "h4")
    ranges.read(("h4", "h4"), 17)
    assert ranges.next() == ("h5", "h5")
    ranges.read(("h5", "h5"), 17)
    assert ranges.next() is None


def test_hosts_per_range_stay_bounded_and_a_host_past_the_bound_is_alone() -> None:
    """Few samples per host: `max_hosts` hosts per range. A host that alone passes the bound
    (h3, foreseen 100 of at most 25) is a range of its own, and the next range starts after it."""
    few = HostRanges([f"h{i}" for i in range(1, 8)], [1.0] * 7, max_hosts=3, max_samples=100)
    assert few.next() == ("h1", "h1")
    few.read(("h1", "h1"), 1)
    assert few.next() == ("h2", "h4")
    assert few.next() == ("h5", "h7")
    big = HostRanges(["h1", "h2", "h3", "h4"], [1.0, 1.0, 100.0, 1.0], max_hosts=8, max_samples=25)
    assert big.next() == ("h1", "h1")
    big.read(("h1", "h1"), 1)
    assert big.next() == ("h2", "h2")  # h2 with h3 would be foreseen at 101
    assert big.next() == ("h3", "h3")
    assert big.next() == ("h4", "h4")
    assert big.next() is None


def test_no_hosts_no_range() -> None:
    assert HostRanges.of(_alloc([]), max_hosts=8).next() is None


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_generated(six_hosts(11), tmp_path_factory.mktemp("ranges"))


def test_the_bound_holds_and_the_tables_do_not_depend_on_the_cut(
    generated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ranges of at most 20,000 samples (a host-day here is about 46,000): every range reads
    one host; the per-job tables equal those of the default ranges, row for row."""
    read: list[tuple[tuple[str, str], int]] = []
    range_samples = read_ahead.range_samples

    def spy(
        con: duckdb.DuckDBPyConnection,
        cluster: str,
        alloc: pl.DataFrame,
        r: tuple[str, str],
        data_dir: Path | None = None,
        footers: Footers | None = None,
    ) -> tuple[pl.DataFrame, pl.DataFrame]:
        out = range_samples(con, cluster, alloc, r, data_dir, footers)
        read.append((r, out[1].height))
        return out

    monkeypatch.setattr(read_ahead, "range_samples", spy)
    analyze(Settings(data_dir=generated), rebuild=True, quiet=True)
    default = per_job_tables(generated)
    assert max(n for _, n in read) <= RANGE_MAX_SAMPLES
    assert any(lo != hi for (lo, hi), _ in read)  # default ranges hold several hosts
    read.clear()
    analyze(Settings(data_dir=generated), rebuild=True, quiet=True, range_samples=20_000)
    assert read and all(lo == hi for (lo, hi), _ in read)
    assert len({r for r, _ in read}) >= 6
    assert default["job_usage"].height > 50
    for name, frame in per_job_tables(generated).items():
        assert frame.equals(default[name]), name
