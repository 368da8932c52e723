"""A host range reads a passed-on reading (job_samples.PASSED_ON: power, the energy counter, the
coarse busy metric, SM and tensor activity) only where its files can hold a value of it, by
their parquet footers (warehouse/footers.py, read_ahead.range_samples), and leaving one out
changes no result: energy and looks-busy take a reading not read as null throughout.

- hand-built files: a column absent, one all null over two row groups, one with a single
  value, one written without statistics, a damaged file;
- hand-computed energy of a counter without power, and looks-busy's evidence without a fine
  metric or power, each the same with the reading absent as with it all null;
- a generated cluster whose first two days carry every reading but tensor activity (all null)
  and whose last day's files lack them (columns dropped, power null), analyzed in one-day
  batches: the ranges over the last day alone read no reading, the others all but tensor
  activity, and every result table equals that of the same analyze reading every reading in
  every range (what analyze did before).
"""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from gpuwaste import generate
from gpuwaste.analyses import energy, job_samples, looks_busy, read_ahead
from gpuwaste.analyses.idle_slots import HELD_SCHEMA
from gpuwaste.analyses.run import analyze
from gpuwaste.config import Settings, Thresholds
from gpuwaste.warehouse import footers
from gpuwaste.warehouse.footers import Footers, file_values, may_hold_values
from gpuwaste.warehouse.results import RESULT_TABLES
from gpuwaste.warehouse.store import Warehouse, atomic_write_parquet

PASSED_ON = job_samples.PASSED_ON


def test_footers_say_which_columns_can_hold_a_value(tmp_path: Path) -> None:
    """Hand-built: per file, the non-null values of each column it holds, from the row groups'
    statistics (None: unknown); over files, a column is read where one may hold a value."""
    two_groups = {"row_group_size": 2}
    absent = tmp_path / "absent.parquet"
    pl.DataFrame({"x": [1.0, 2.0]}).write_parquet(absent)
    all_null = tmp_path / "all_null.parquet"
    pl.DataFrame(
        {"x": [1.0, 2, 3, 4], "y": [None, None, None, None]}, schema_overrides={"y": pl.Float64}
    ).write_parquet(all_null, statistics=True, **two_groups)
    one = tmp_path / "one.parquet"
    pl.DataFrame({"y": [None, None, None, 5.0]}).write_parquet(one, statistics=True, **two_groups)
    no_stats = tmp_path / "no_stats.parquet"
    pl.DataFrame({"y": [None, None]}, schema={"y": pl.Float64}).write_parquet(
        no_stats, statistics=False
    )
    damaged = tmp_path / "damaged.parquet"
    damaged.write_bytes(b"PAR1 not a parquet file")

    assert file_values(absent, ["y", "x"]) == {"x": 2}
    assert file_values(all_null, ["x", "y"]) == {"x": 4, "y": 0}
    assert file_values(one, ["y"]) == {"y": 1}
    assert file_values(no_stats, ["y"]) == {"y": None}
    assert file_values(damaged, ["y"]) is None
    assert file_values(tmp_path / "gone.parquet", ["y"]) is None

    def read(*files: Path) -> tuple[str, ...]:
        return may_hold_values([file_values(f, ["y", "x"]) for f in files], ["y", "x"])

    assert read(absent) == ("x",)
    assert read(absent, all_null) == ("x",)  # absent in one, all null in the other
    assert read(absent, all_null, one) == ("y", "x")  # one value in one row group of one file
    assert read(no_stats) == ("y",)  # statistics do not say: read
    assert read(absent, damaged) == ("y", "x")  # a footer not read: read everything
    assert read() == ()


def test_a_footer_is_read_once_until_its_file_is_replaced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "f.parquet"
    pl.DataFrame({"y": [None]}, schema={"y": pl.Float64}).write_parquet(path)
    calls: list[Path] = []
    real = footers.file_values

    def counted(p: Path, columns: Any) -> Any:
        calls.append(p)
        return real(p, columns)

    monkeypatch.setattr(footers, "file_values", counted)
    seen = Footers(["y"])
    assert seen.may_hold_values([path]) == ()
    assert seen.may_hold_values([path, path]) == ()
    assert calls == [path]
    atomic_write_parquet(pl.DataFrame({"y": [1.0, 2.0]}), path)  # replaced: a new size
    assert seen.may_hold_values([path]) == ("y",)
    assert calls == [path, path]


T0 = datetime(2026, 1, 1, tzinfo=UTC)
ALLOC = {"job_id": "j", "attempt": 0, "host": "h", "gpu": 0, "gpu_instance": None,
         "mig_profile": None}  # fmt: skip


def _flags(**readings: list[float | None]) -> pl.DataFrame:
    """Three sample_flags rows of one allocation, a minute apart, busy, with `readings`."""
    return pl.DataFrame(
        {
            "alloc_id": [1, 1, 1],
            "ts": [T0 + timedelta(minutes=k) for k in range(3)],
            "idle": [False] * 3, "held": [False] * 3, "is_first": [True, False, False],
            "gap_before": [False] * 3, "covered_s": [60.0] * 3, "tail_covered_s": [0.0, 0.0, 60.0],
            **readings,
        },
        schema_overrides={name: pl.Float64 for name in readings},
    )  # fmt: skip


def _energy(flags: pl.DataFrame) -> pl.DataFrame:
    alloc = pl.DataFrame([{"alloc_id": 1, **ALLOC, "device_model": "NVIDIA H100"}])
    never = pl.DataFrame({"alloc_id": [1], "never_used": [False]})
    slots = pl.DataFrame(
        schema={**alloc.drop("alloc_id", "device_model").schema, "start_ts": pl.Datetime(
            "us", "UTC"), "end_ts": pl.Datetime("us", "UTC")}
    )  # fmt: skip
    return energy.compute(flags, never, slots, alloc, pl.DataFrame(schema=HELD_SCHEMA))


def test_energy_of_a_counter_without_power_read() -> None:
    """Hand-computed: a counter at 0, 30,000 and 66,000 J and no power: the two increases,
    66,000 J, over the seconds of the second and third samples and the third's tail, 180 s
    (the first sample has no power to stand for its seconds); the same whether power was read
    (all null) or not read at all. No counter and no
    power read: no row, as with both read and all null."""
    counter = [0.0, 30_000.0, 66_000.0]
    read = _energy(_flags(energy_j=counter, power_w=[None] * 3))
    assert read.select("energy_j", "power_s", "counter_set_aside").to_dicts() == [
        {"energy_j": 66_000.0, "power_s": 180.0, "counter_set_aside": 0}
    ]
    assert_frame_equal(_energy(_flags(energy_j=counter)), read)
    assert _energy(_flags(energy_j=[None] * 3, power_w=[None] * 3)).is_empty()
    assert _energy(_flags()).is_empty()


def test_looks_busy_with_a_fine_metric_or_power_not_read() -> None:
    """The evidence of GPU_UTIL without SM or tensor activity or power read equals that of
    those read all null (coarse samples counted, no arm); without GPU_UTIL read, none."""
    alloc = pl.DataFrame([{"alloc_id": 1, **ALLOC, looks_busy.IDLE_POWER: 70.0}])
    t = Thresholds()
    coarse = {"gpu_util": [100.0, 100.0, 0.0]}
    nulls: dict[str, list[float | None]] = {c: [None] * 3 for c in looks_busy.READINGS}
    read = looks_busy.evidence(_flags(**{**nulls, **coarse}), alloc, t)
    assert read.select("coarse_samples", "fine_samples", "power_samples").row(0) == (3, 0, 0)
    assert_frame_equal(looks_busy.evidence(_flags(**coarse), alloc, t), read)
    with_sm = {**coarse, "sm_active": [1.0, 50.0, 0.0]}
    assert_frame_equal(
        looks_busy.evidence(_flags(**with_sm), alloc, t),
        looks_busy.evidence(_flags(**{**nulls, **with_sm}), alloc, t),
    )
    assert looks_busy.evidence(_flags(**with_sm), alloc, t)["hollow_samples"].item() == 1
    assert looks_busy.evidence(_flags(sm_active=[1.0] * 3), alloc, t).is_empty()


CLUSTER = "c"
SPEC = generate.GeneratorSpec(seed=5, gpus=24, days=2.0, interval_s=60, cluster=CLUSTER)


def _with_readings(samples: pl.DataFrame) -> pl.DataFrame:
    """The passed-on readings from the generated utilization and power: GPU_UTIL 100 % on a
    third of the busy samples with SM activity 1 % (a busy loop for the fine arm), an energy
    counter that sums power x 60 s per GPU, and tensor activity all null (as slurm-job-exporter
    and nvidia-smi give it: never read)."""
    loop = (pl.col("util") > 0) & (pl.col("ts").dt.minute() % 3 == 0)
    return samples.sort("host", "gpu", "ts").with_columns(
        pl.when(loop).then(100.0).otherwise(pl.col("util")).alias("gpu_util"),
        pl.when(loop).then(1.0).otherwise(pl.col("util")).alias("sm_active"),
        pl.lit(None, pl.Float64).alias("tensor_active"),
        (pl.col("power_w") * 60).cum_sum().over("host", "gpu").alias("energy_j"),
    )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The cluster's warehouse: every reading on the first two days, none on the last (its
    files lack the four columns, and power is null)."""
    root = tmp_path_factory.mktemp("readings")
    generate.write_samples_parquet(SPEC, root / "samples")
    samples = _with_readings(pl.read_parquet(root / "samples" / "*" / "*.parquet"))
    wh = Warehouse(root / "wh")
    end = SPEC.start + timedelta(days=SPEC.days)
    wh.replace_window("gpu_samples", CLUSTER, SPEC.start, end, samples)
    sim = generate.simulate(SPEC)
    wh.upsert("jobs", CLUSTER, "gen", generate.jobs_frame(sim))
    wh.upsert("job_gpus", CLUSTER, "gen", generate.job_gpus_frame(sim))
    files = wh.day_files("gpu_samples", CLUSTER)
    assert len(files) == 3
    for path in files[2:]:
        bare = pl.read_parquet(path).drop("energy_j", "gpu_util", "sm_active", "tensor_active")
        atomic_write_parquet(bare.with_columns(pl.lit(None, pl.Float64).alias("power_w")), path)
    return root / "wh"


def _analyzed(
    src: Path, dest: Path, monkeypatch: pytest.MonkeyPatch, read_all: bool
) -> tuple[dict[str, pl.DataFrame], list[tuple[str, tuple[str, ...]]]]:
    """Every result table of a copy of `src` analyzed in one-day batches (with `read_all`, every
    range reads every reading), and each range's last day and readings read."""
    shutil.copytree(src, dest)
    ranges: list[tuple[str, tuple[str, ...]]] = []
    read = job_samples.read

    def spy(con: Any, alloc: pl.DataFrame, source: str = "", readings: Any = PASSED_ON) -> Any:
        span = read_ahead.date_span(alloc)
        assert span is not None
        ranges.append((span[0].isoformat(), tuple(readings)))
        return read(con, alloc, source, readings)

    with monkeypatch.context() as m:
        m.setattr(read_ahead.job_samples, "read", spy)
        if read_all:
            m.setattr(Footers, "may_hold_values", lambda self, files: self.columns)
        analyze(Settings(data_dir=dest), rebuild=True, quiet=True, batch_days=1)
    wh = Warehouse(dest)
    tables = {name: wh.read(name, CLUSTER) for name in RESULT_TABLES if wh.clusters(name)}
    return tables, ranges


def test_leaving_out_the_readings_a_range_cannot_have_changes_no_result(
    cluster: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    narrow, narrow_ranges = _analyzed(cluster, tmp_path / "narrow", monkeypatch, read_all=False)
    every, every_ranges = _analyzed(cluster, tmp_path / "every", monkeypatch, read_all=True)
    last_day = (SPEC.start + timedelta(days=SPEC.days)).date().isoformat()
    # the ranges over the last day alone read nothing passed on; those that reach a day with
    # readings (a file holding them beside one that does not) read all but tensor activity
    with_values = tuple(c for c in PASSED_ON if c != "tensor_active")
    assert {r for day, r in narrow_ranges if day == last_day} == {()}
    assert {r for day, r in narrow_ranges if day != last_day} == {with_values}
    assert {r for _, r in every_ranges} == {PASSED_ON}
    assert sorted(d for d, _ in narrow_ranges) == sorted(d for d, _ in every_ranges)
    # the readings reached the results: energy, and looks-busy judged (a fine metric read)
    jobs = narrow["job_usage"]
    assert jobs["energy_kwh"].is_not_null().sum() > 10
    assert jobs["looks_busy"].is_not_null().sum() > 10
    assert narrow.keys() == every.keys() and len(narrow) > 20
    for name, frame in narrow.items():
        other = every[name]
        keys = [c for c, t in frame.schema.items() if not t.is_float() and not t.is_nested()]
        try:
            assert_frame_equal(
                frame.sort(keys, nulls_last=True),
                other.sort(keys, nulls_last=True),
                check_exact=False,
                rel_tol=1e-9,
                abs_tol=0.0,
            )
        except AssertionError as e:
            raise AssertionError(f"{name}: {e}") from None
