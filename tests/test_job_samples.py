"""The polars, numpy and compiled per-sample pass (the definitions: the code `gpuwaste analyze`
runs) gives the rows of its test oracles, the same definitions in SQL (tests/oracles/):
job_samples.py = job_samples.sql, sample_flags.py = gpu_intervals.sql + sample_flags.sql,
stable_phases.level_runs_frame = stable_phases.sql, allocation_sums.py = gpu_sample_stats.sql
and job_checkpoint.sql, idle_slots.py = idle_slots.sql, on hypothesis cases (irregular and
duplicate-free timestamps, samples outside allocations, GPUs shared by two allocations, null
memory, rows in any order) and on a generated cluster read from a real warehouse. The
per-minute layer (allocation_sums.util_buckets, util_hist, fluctuation) has no oracle: the
hand-computed cases below pin it, and the order-independence checks beside the oracles'."""

from __future__ import annotations

import threading
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from gpuwaste import generate
from gpuwaste.analyses import (
    allocation_sums,
    idle_slots,
    job_samples,
    read_ahead,
    sample_flags,
    stable_phases,
)
from gpuwaste.analyses.host_ranges import HostRanges
from gpuwaste.analyses.sqlfiles import define_macros, load_sql, set_variables, threshold_variables
from gpuwaste.config import Thresholds
from gpuwaste.warehouse.catalog import connect, cursor
from gpuwaste.warehouse.footers import Footers
from tests.support.generated_warehouse import write_generated

ORACLES = Path(__file__).parent / "oracles"


def oracle(name: str) -> str:
    """The query of test oracle tests/oracles/<name>.sql."""
    return (ORACLES / f"{name}.sql").read_text(encoding="utf-8")


T0 = datetime(2026, 11, 1, 23, 50, tzinfo=UTC)  # crosses midnight
HOSTS = ["h1", "h2", "h3"]
SAMPLE_SCHEMA = {
    "host": pl.String,
    "gpu": pl.Int16,
    "gpu_instance": pl.Int16,
    "ts": pl.Datetime("us", "UTC"),
    "util": pl.Float64,
    "mem_used_mib": pl.Float64,
    "mem_total_mib": pl.Float64,
}
ALLOC_SCHEMA = {
    "alloc_id": pl.Int64,
    "job_id": pl.String,
    "attempt": pl.Int16,
    "host": pl.String,
    "gpu": pl.Int16,
    "gpu_instance": pl.Int16,
    "start_ts": pl.Datetime("us", "UTC"),
    "end_ts": pl.Datetime("us", "UTC"),
}
KEYS = ["alloc_id", "ts"]
SLOT_KEYS = ["job_id", "attempt", "host", "gpu", "gpu_instance", "start_ts"]
# job_samples, sample_flags, level_runs, gpu_sample_stats, checkpoint_gpus (the SQL's per_gpu),
# batch_checkpoint, idle_slots, util_hist and fluctuation, by name
Pass = dict[str, pl.DataFrame]


def _devices(alloc: pl.DataFrame, gpu_weight: float = 1.0) -> pl.DataFrame:
    """`alloc` with the columns of analyze_alloc that name and weigh its device: a MIG profile
    for an instance, and `gpu_weight` (an instance's slice: the weight of every allocation)."""
    return alloc.with_columns(
        pl.when(pl.col("gpu_instance").is_not_null()).then(pl.lit("1g.10gb")).alias("mig_profile"),
        pl.lit(gpu_weight, pl.Float64).alias("gpu_weight"),
    )


def _ending(sql: str, tail: str) -> str:
    """`sql` (a file's query, ending `select * from final`) ending with `tail` instead."""
    body = sql.rstrip().removesuffix("select * from final")
    assert body != sql.rstrip(), "the query does not end with select * from final"
    return body + tail


def _sql_pass(samples: pl.DataFrame, alloc: pl.DataFrame, t: Thresholds) -> Pass:
    """Every relation of the pass by the SQL files, in DuckDB."""
    con = duckdb.connect()
    con.execute("set TimeZone = 'UTC'")
    samples = _with_energy(samples)
    con.register("samples_in", samples)
    con.execute(
        "create view gpu_samples as select *, 'c' as cluster, ts::date as date from samples_in"
    )
    con.register("analyze_alloc", alloc)
    lo, hi = samples["ts"].min(), samples["ts"].max()
    assert isinstance(lo, datetime) and isinstance(hi, datetime)
    set_variables(
        con,
        {
            **threshold_variables(t),
            "cluster": "c",
            "date_lo": lo.date(),
            "date_hi": hi.date(),
            "host_lo": "",
            "host_hi": "~",
        },
    )
    con.execute(f"create table job_samples as {oracle('job_samples')}")
    con.execute(f"create table gpu_intervals as {oracle('gpu_intervals')}")
    con.execute(f"create view sample_flags as {oracle('sample_flags')}")
    flags = con.sql("select * from sample_flags").pl()
    con.execute(f"create table gpu_sample_stats as {oracle('gpu_sample_stats')}")
    set_variables(con, {"phase_step_mib": t.phase_tolerance_mib / stable_phases.STEP_FRACTION})
    runs = con.sql(oracle("stable_phases")).pl()
    ckpt = oracle("job_checkpoint")
    return {
        "job_samples": con.sql("select * from job_samples").pl(),
        "sample_flags": flags,
        "level_runs": runs,
        "gpu_sample_stats": con.sql("select * from gpu_sample_stats").pl(),
        "checkpoint_gpus": con.sql(_ending(ckpt, "select * from per_gpu")).pl(),
        "batch_checkpoint": con.sql(ckpt).pl(),
        "idle_slots": con.sql(oracle("idle_slots")).pl(),
    }


def _with_energy(samples: pl.DataFrame) -> pl.DataFrame:
    """`samples` with the readings passed on that they leave out (power, the energy counter,
    the coarse and fine activities) null, as files without them read."""
    return samples.with_columns(
        pl.lit(None, pl.Float64).alias(c) for c in job_samples.PASSED_ON if c not in samples
    )


def _polars_job_samples(
    samples: pl.DataFrame, alloc: pl.DataFrame, idle_mem_floor_mib: float, window_s: float
) -> pl.DataFrame:
    """job_samples.compute over frames: samples (host, gpu, ts, util, mem_used_mib,
    mem_total_mib), in stored order, and allocations -> the rows of job_samples.sql."""
    hosts, alloc_keyed = job_samples._keyed_allocations(alloc)
    keyed = job_samples._keyed(_with_energy(samples), hosts)
    return job_samples._compute_keyed(keyed, alloc_keyed, idle_mem_floor_mib, window_s)


def _per_allocation(flags: pl.DataFrame, alloc: pl.DataFrame, t: Thresholds) -> Pass:
    """What allocation_sums.py makes of sample_flags rows, by the SQL's names."""
    sums = allocation_sums.compute(flags, t)
    return {
        "gpu_sample_stats": allocation_sums.gpu_sample_stats(sums),
        "checkpoint_gpus": allocation_sums.checkpoint_gpus(sums),
        "batch_checkpoint": allocation_sums.checkpointing(sums, alloc, t),
        "util_hist": allocation_sums.util_hist(allocation_sums.util_buckets(flags), alloc),
        "fluctuation": allocation_sums.fluctuation(sums, alloc),
    }


def _polars_pass(samples: pl.DataFrame, alloc: pl.DataFrame, t: Thresholds) -> Pass:
    js = _polars_job_samples(samples, alloc, t.idle_mem_floor_mib, t.fluctuation_window_s)
    flags = sample_flags.compute(js, t)
    sums = _per_allocation(flags, alloc, t)
    return {
        "job_samples": js,
        "sample_flags": flags,
        "level_runs": stable_phases.level_runs_frame(flags, t),
        **sums,
        "idle_slots": idle_slots.compute(flags, sums["gpu_sample_stats"], alloc, t),
    }


def _assert_same(fast: Pass, sql: Pass, alloc: pl.DataFrame, t: Thresholds) -> None:
    for name in ("job_samples", "sample_flags"):
        a, b = fast[name], sql[name]
        assert a.columns == b.columns, name
        assert_frame_equal(a.sort(KEYS), b.sort(KEYS), check_exact=True)
    # level runs: sums in another order may differ in the last bits
    runs_fast, runs_sql = fast["level_runs"], sql["level_runs"]
    assert runs_fast.columns == runs_sql.columns
    assert_frame_equal(
        runs_fast.sort("alloc_id", "start_ts"),
        runs_sql.sort("alloc_id", "start_ts"),
        check_exact=False,
        rel_tol=1e-9,
    )
    # the phase merge needs runs in allocation and time order, as the SQL returns them
    ordered = runs_fast.select("alloc_id", "start_ts")
    assert ordered.equals(ordered.sort("alloc_id", "start_ts"))
    # per allocation and per job: the same rows, sums to the last bits, in any row order
    flags_shuffled = fast["sample_flags"].sample(fraction=1.0, shuffle=True, seed=2)
    again = _per_allocation(flags_shuffled, alloc, t)
    for name, key in (("gpu_sample_stats", "alloc_id"), ("checkpoint_gpus", "alloc_id")):
        ours, theirs = fast[name].sort(key), sql[name].sort(key)
        assert ours.schema == theirs.schema, name
        assert_frame_equal(ours, theirs, check_exact=False, rel_tol=1e-9)
        assert_frame_equal(again[name].sort(key), ours, check_exact=False, rel_tol=1e-9)
    jobs_fast, jobs_sql = fast["batch_checkpoint"], sql["batch_checkpoint"]
    assert jobs_fast.schema == jobs_sql.schema
    assert_frame_equal(jobs_fast.sort("job_id"), jobs_sql.sort("job_id"))
    assert_frame_equal(again["batch_checkpoint"].sort("job_id"), jobs_fast.sort("job_id"))
    _assert_same_per_job(fast, sql, alloc, t, again)


def _assert_same_per_job(
    fast: Pass, sql: Pass, alloc: pl.DataFrame, t: Thresholds, again: Pass
) -> None:
    """idle_slots: the same rows as the SQL; idle_slots, util_hist and fluctuation: the same
    rows from their inputs in any row order (`again`: allocation_sums.py's rows from shuffled
    sample_flags rows)."""
    slots = fast["idle_slots"]
    assert slots.schema == sql["idle_slots"].schema
    assert_frame_equal(slots.sort(SLOT_KEYS), sql["idle_slots"].sort(SLOT_KEYS), check_exact=True)
    hist_keys = ["job_id", "bucket"]
    hist = fast["util_hist"].sort(hist_keys)
    fluct = fast["fluctuation"].sort("job_id")
    flags_shuffled = fast["sample_flags"].sample(fraction=1.0, shuffle=True, seed=5)
    slots_again = idle_slots.compute(flags_shuffled, fast["gpu_sample_stats"], alloc, t)
    assert_frame_equal(slots_again.sort(SLOT_KEYS), slots.sort(SLOT_KEYS))
    hist_again = again["util_hist"].sort(hist_keys)
    assert_frame_equal(hist_again, hist, check_exact=False, rel_tol=1e-9)
    assert_frame_equal(again["fluctuation"].sort("job_id"), fluct)


readings = st.lists(
    st.tuples(
        st.integers(min_value=1, max_value=90),  # seconds since the previous sample
        st.sampled_from([0.0, 0.0, 0.0, 30.0, 100.0]),
        st.sampled_from([0.0, 0.0, 100.0, 2000.0, 2040.0, 9000.0, None]),
    ),
    min_size=1,
    max_size=40,
)
# (gpu, MIG instance): GPU 2 is also split into instances 1 and 2, each a device of its own
DEVICES = [(0, None), (1, None), (2, None), (2, 1), (2, 2)]
allocation = st.tuples(
    st.integers(min_value=0, max_value=len(HOSTS) - 1),
    st.integers(min_value=-1, max_value=2),  # -1: GPU index unknown (left out by both)
    st.sampled_from([None, None, 1, 2]),  # MIG instance (None: the whole GPU)
    st.integers(min_value=0, max_value=900),  # start, seconds after T0
    st.integers(min_value=1, max_value=1500),  # length
)


@st.composite
def cases(draw: st.DrawFn) -> tuple[pl.DataFrame, pl.DataFrame, Thresholds]:
    rows = []
    for host in HOSTS:
        for gpu, instance in DEVICES:
            ts = T0
            for step, util, mem in draw(readings):
                ts += timedelta(seconds=step)
                rows.append((host, gpu, instance, ts, util, mem, 16384.0))
    samples = pl.DataFrame(rows, schema=SAMPLE_SCHEMA, orient="row")
    allocs = draw(st.lists(allocation, min_size=1, max_size=8))
    alloc = pl.DataFrame(
        [
            (
                i + 1,
                f"j{i}",
                0,
                HOSTS[h],
                g,
                inst,
                T0 + timedelta(seconds=s),
                T0 + timedelta(seconds=s + n),
            )
            for i, (h, g, inst, s, n) in enumerate(allocs)
        ],
        schema=ALLOC_SCHEMA,
        orient="row",
    )
    alloc = _devices(alloc, draw(st.sampled_from([1.0, 1.0, 1 / 7])))
    order = draw(st.sampled_from(["stored", "shuffled", "reversed"]))
    if order == "stored":  # as the warehouse keeps them: by day, then host, GPU, time
        samples = samples.sort(pl.col("ts").dt.date(), "host", "gpu", "ts")
    elif order == "shuffled":
        samples = samples.sample(fraction=1.0, shuffle=True, seed=draw(st.integers(0, 99)))
    else:
        samples = samples.reverse()
    t = Thresholds(
        sampling_interval_s=draw(st.sampled_from([None, None, 20.0])),
        fluctuation_window_s=draw(st.sampled_from([60.0, 120.0, 45.0])),
        idle_mem_floor_mib=draw(st.sampled_from([0.0, 100.0])),
        # loose enough that some random GPUs checkpoint, not only the rule's default
        checkpoint_min_dips=draw(st.sampled_from([2, 3])),
        checkpoint_spacing_tolerance=draw(st.sampled_from([0.2, 1.0])),
        # short enough that random idle runs make slots; ranges that random windows cross
        idle_slot_min_s=draw(st.sampled_from([60.0, 20.0])),
        fluctuation_range_pct=draw(st.sampled_from([90.0, 50.0, 30.0])),
    )
    return samples, alloc, t


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_polars_pass_equals_sql(case: tuple[pl.DataFrame, pl.DataFrame, Thresholds]) -> None:
    samples, alloc, t = case
    _assert_same(_polars_pass(samples, alloc, t), _sql_pass(samples, alloc, t), alloc, t)


def test_shared_gpu_rows_come_once_per_allocation() -> None:
    """Two allocations overlapping on one GPU (a shared GPU) each get the samples inside them."""
    samples = pl.DataFrame(
        [
            ("h1", 0, None, T0 + timedelta(seconds=15 * i), 10.0, 100.0, 16384.0)
            for i in range(1, 9)
        ],
        schema=SAMPLE_SCHEMA,
        orient="row",
    )
    alloc = pl.DataFrame(
        [
            (1, "a", 0, "h1", 0, None, T0, T0 + timedelta(seconds=90)),
            (2, "b", 0, "h1", 0, None, T0 + timedelta(seconds=45), T0 + timedelta(seconds=200)),
        ],
        schema=ALLOC_SCHEMA,
        orient="row",
    ).pipe(_devices)
    js = _polars_job_samples(samples, alloc, 0.0, 120.0)
    counts = dict(js.group_by("alloc_id").len().iter_rows())
    assert counts == {1: 5, 2: 6}  # 15..75 s and 45..120 s
    t = Thresholds()
    _assert_same(_polars_pass(samples, alloc, t), _sql_pass(samples, alloc, t), alloc, t)


def test_generated_cluster_from_the_warehouse(tmp_path: Path) -> None:
    """The I/O path (samples read from parquet in stored order, keyed in SQL) on a generated
    cluster equals the SQL, host range by host range."""
    spec = generate.GeneratorSpec(seed=5, gpus=24, days=1.0, interval_s=15, cluster="c")
    write_generated(spec, tmp_path)
    t = Thresholds()
    con = connect(tmp_path / "wh")
    ids = pl.DataFrame({"job_id": [r[0] for r in con.sql("select job_id from jobs").fetchall()]})
    con.register("analyze_batch", ids)
    as_of = spec.start + timedelta(days=1)
    set_variables(con, {**threshold_variables(t), "cluster": "c", "as_of": as_of})
    con.execute(f"create temp table shared_spans as {load_sql('plan/shared_spans')}")
    define_macros(con)
    con.execute(f"create temp table alloc_intervals as {load_sql('staging/alloc_intervals')}")
    con.execute(f"create temp table analyze_alloc as {load_sql('staging/allocations')}")
    lo, hi = con.sql(
        "select min(start_ts)::date, max(end_ts - interval 1 microsecond)::date from analyze_alloc"
    ).fetchall()[0]
    set_variables(con, {"date_lo": lo, "date_hi": hi})
    hosts = [r[0] for r in con.sql("select distinct host from analyze_alloc order by 1").fetchall()]
    assert len(hosts) >= 3
    allocs = con.sql("select * from analyze_alloc").pl()
    compared = 0
    for host_lo, host_hi in [(hosts[0], hosts[1]), (hosts[2], hosts[-1])]:
        set_variables(con, {"host_lo": host_lo, "host_hi": host_hi})
        alloc = con.sql(
            "select alloc_id, host, gpu, start_ts, end_ts from analyze_alloc "
            "where host between getvariable('host_lo') and getvariable('host_hi')"
        ).pl()
        fast = job_samples.compute(con, alloc, t.idle_mem_floor_mib, t.fluctuation_window_s)
        # what the batch's reader thread reads ahead for the range, on a cursor of its own
        with cursor(con) as reader:
            _, ahead = read_ahead.range_samples(reader, "c", allocs, (host_lo, host_hi))
        assert_frame_equal(ahead, job_samples.read(con, alloc), check_exact=True)
        con.execute(
            "create or replace temp table range_alloc as select * from analyze_alloc "
            "where host between getvariable('host_lo') and getvariable('host_hi')"
        )
        sql = con.sql(oracle("job_samples").replace("from analyze_alloc", "from range_alloc")).pl()
        assert fast.height > 1000
        assert_frame_equal(fast.sort(KEYS), sql.sort(KEYS), check_exact=True)
        compared += fast.height
    assert compared > 10_000


@pytest.mark.parametrize("under_way", [True, False])
def test_a_pass_that_stops_early_interrupts_the_read_ahead(
    monkeypatch: pytest.MonkeyPatch, under_way: bool
) -> None:
    """When the steps of a range fail, the read of the next range (here a query of minutes) is
    interrupted, not waited for, and the reader thread ends: also when the caller stops before
    the read's query has started (while it lists its files), since DuckDB drops an interrupt
    sent to a connection with no query under way."""
    started, interrupted_idle, outcome = threading.Event(), threading.Event(), []
    wait = read_ahead.wait

    def waits(*args: Any, **kwargs: Any) -> Any:  # the caller waits after each interrupt
        interrupted_idle.set()
        return wait(*args, **kwargs)

    def read(
        con: duckdb.DuckDBPyConnection,
        cluster: str,
        alloc: pl.DataFrame,
        r: tuple[str, str],
        data_dir: Path | None,
        footers: Footers | None,
    ) -> tuple[pl.DataFrame, pl.DataFrame]:
        if r[0] == "a":
            return alloc, pl.DataFrame({"n": [1]})
        started.set()
        if not under_way and not interrupted_idle.wait(10):  # the first interrupt is lost
            outcome.append("never interrupted")
            return alloc, pl.DataFrame()
        try:
            con.sql("select sum(i * i) from range(100_000_000_000) t(i)").fetchall()
            outcome.append("finished")
        except duckdb.InterruptException:
            outcome.append("interrupted")
            raise
        return alloc, pl.DataFrame()

    monkeypatch.setattr(read_ahead, "range_samples", read)
    monkeypatch.setattr(read_ahead, "wait", waits)
    with duckdb.connect() as con:
        ranges = HostRanges(["a", "b"], [1.0, 1.0], max_hosts=1)
        ahead = read_ahead.read_ahead(con, "c", pl.DataFrame(), ranges)
        assert next(ahead)[0] == ("a", "a")
        assert started.wait(30)
        if under_way:
            time.sleep(0.3)  # the query is under way
        ahead.close()
    assert outcome == ["interrupted"]
    assert not [t for t in threading.enumerate() if t.name.startswith("gpuwaste-read")]


def test_the_days_of_a_pass_end_before_an_exclusive_end() -> None:
    """Hand-computed: an allocation that ends at midnight does not reach the next day; a naive
    timestamp is UTC; no allocation, no days."""
    t0 = datetime(2026, 1, 1, 22, tzinfo=UTC)
    span = pl.DataFrame({"start_ts": [t0, t0 + timedelta(hours=1)], "end_ts": [t0, t0]})
    midnight = span.with_columns(end_ts=pl.lit(datetime(2026, 1, 3, tzinfo=UTC)))
    assert read_ahead.date_span(midnight) == (date(2026, 1, 1), date(2026, 1, 2))
    one_more = midnight.with_columns(pl.col("end_ts") + timedelta(microseconds=1))
    assert read_ahead.date_span(one_more) == (date(2026, 1, 1), date(2026, 1, 3))
    naive = pl.DataFrame({"start_ts": [datetime(2026, 1, 1, 23)], "end_ts": [datetime(2026, 1, 2)]})
    assert read_ahead.date_span(naive) == (date(2026, 1, 1), date(2026, 1, 1))
    assert read_ahead.date_span(span.clear()) is None


def test_each_host_is_read_over_the_span_of_its_allocations() -> None:
    """Hand-computed: per host in name order, the first start and the last end of its
    allocations (two GPUs of host b, one MIG instance and one whole GPU of host a)."""
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    hour = timedelta(hours=1)
    alloc = pl.DataFrame(
        {
            "alloc_id": [1, 2, 3, 4, 5],
            "job_id": ["j1", "j2", "j3", "j4", "j5"],
            "attempt": [0] * 5,
            "host": ["b", "b", "a", "a", "c"],
            "gpu": [0, 1, 0, 1, -1],  # c: GPU unknown, not read at all
            "gpu_instance": [None, None, 2, None, None],
            "start_ts": [t0 + 5 * hour, t0 + 2 * hour, t0 + 9 * hour, t0 + 1 * hour, t0],
            "end_ts": [t0 + 6 * hour, t0 + 3 * hour, t0 + 30 * hour, t0 + 4 * hour, t0 + hour],
        },
        schema=ALLOC_SCHEMA,
    )
    hosts, keyed = job_samples._keyed_allocations(alloc)
    assert job_samples._read_params(hosts, keyed) == [
        ["a", "b"],
        [t0 + 1 * hour, t0 + 2 * hour],
        [t0 + 30 * hour, t0 + 6 * hour],
    ]


FLAG_SCHEMA = {
    "alloc_id": pl.Int64,
    "ts": pl.Datetime("us", "UTC"),
    "interval_s": pl.Float64,
    "util": pl.Float64,
    "mem_used_mib": pl.Float64,
    "mem_total_mib": pl.Float64,
    "idle": pl.Boolean,
    "covered_s": pl.Float64,
    "tail_covered_s": pl.Float64,
    "window_no": pl.Float64,
    "minute": pl.Float64,
    "prev_util": pl.Float64,
}


def _flags(frame: pl.DataFrame) -> pl.DataFrame:
    """sample_flags rows of a hand-computed case, the columns it leaves out neutral: 15 s apart,
    no memory readings, idle when the utilization is 0, one window and minute, no sample
    before."""
    neutral: dict[str, pl.Expr] = {
        "interval_s": pl.lit(15.0),
        "mem_used_mib": pl.lit(None),
        "mem_total_mib": pl.lit(None),
        "idle": pl.col("util") == 0,
        "covered_s": pl.lit(15.0),
        "tail_covered_s": pl.lit(0.0),
        "window_no": pl.lit(0.0),
        "minute": pl.lit(0.0),
        "prev_util": pl.lit(None),
    }
    missing = [expr.alias(name) for name, expr in neutral.items() if name not in frame.columns]
    return frame.with_columns(missing).select(list(FLAG_SCHEMA)).cast(FLAG_SCHEMA)  # type: ignore[arg-type]


def test_minutes_hand_computed() -> None:
    """Hand-computed: a minute falls in the bucket of its time-weighted mean utilization; a minute
    that two 45 s windows share is two minutes; the tail of the last sample counts; an
    allocation whose rows are split (not contiguous) is put together first; no rows, no
    buckets."""
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    rows = [  # alloc_id, seconds since start, window_no, minute, util, covered_s, tail_covered_s
        (1, 15, 0.0, 0.0, 10.0, 15.0, 0.0),
        (1, 30, 0.0, 0.0, 20.0, 15.0, 0.0),  # window 0, minute 0: 450 / 30 s = 15
        (2, 10, 0.0, 0.0, 0.0, 10.0, 0.0),
        (1, 45, 1.0, 0.0, 30.0, 15.0, 0.0),  # window 1, minute 0: 30
        (1, 60, 1.0, 1.0, 40.0, 15.0, 5.0),  # window 1, minute 1: 40 over 20 s
    ]
    flags = _flags(
        pl.DataFrame(
            [(a, t0 + timedelta(seconds=s), w, m, u, c, tail) for a, s, w, m, u, c, tail in rows],
            schema=["alloc_id", "ts", "window_no", "minute", "util", "covered_s", "tail_covered_s"],
            orient="row",
        )
    )
    got = allocation_sums.util_buckets(flags)
    assert got.sort("alloc_id", "bucket").rows() == [
        (1, 15, 30.0),
        (1, 30, 15.0),
        (1, 40, 20.0),
        (2, 0, 10.0),
    ]
    sums = allocation_sums.compute(flags, Thresholds())
    assert sums.select("alloc_id", "windows").sort("alloc_id").rows() == [(1, 2), (2, 1)]
    assert allocation_sums.util_buckets(flags.clear()).schema == got.schema


def _sql_over(
    name: str, frames: dict[str, pl.DataFrame], t: Thresholds, tail: str = ""
) -> pl.DataFrame:
    """Test oracle `name` over `frames` (registered by name), ending with `tail` when given."""
    con = duckdb.connect()
    con.execute("set TimeZone = 'UTC'")
    set_variables(con, threshold_variables(t))
    for relation, frame in frames.items():
        con.register(relation, frame)
    return con.sql(_ending(oracle(name), tail) if tail else oracle(name)).pl()


def test_gpu_sample_stats_hand_computed() -> None:
    """Hand-computed: time-weighted means; an allocation without memory readings has no memory
    figures; one whose samples stand for no seconds has no means; rows of an allocation that
    are not contiguous are put together first; the SQL gives the same rows."""
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    rows = [  # alloc_id, s, util, mem_used, mem_total, idle, covered_s, tail_covered_s
        (1, 15, 10.0, 100.0, 16384.0, False, 15.0, 0.0),
        (2, 10, 0.0, None, None, True, 10.0, 0.0),
        (1, 30, 30.0, 300.0, 16384.0, False, 15.0, 0.0),
        (3, 500, 50.0, 10.0, 80.0, False, 0.0, 0.0),
    ]
    flags = _flags(
        pl.DataFrame(
            [(a, t0 + timedelta(seconds=s), *rest) for a, s, *rest in rows],
            schema=[
                *("alloc_id", "ts", "util", "mem_used_mib", "mem_total_mib", "idle"),
                *("covered_s", "tail_covered_s"),
            ],
            orient="row",
        )
    )
    t = Thresholds()
    got = allocation_sums.gpu_sample_stats(allocation_sums.compute(flags, t))
    assert got.sort("alloc_id").rows() == [
        # alloc, interval, samples, observed, util mean, max, mem mean, max, total, never used
        (1, 15.0, 2, 30.0, 20.0, 30.0, 200.0, 300.0, 16384.0, False),
        (2, 15.0, 1, 10.0, 0.0, 0.0, None, None, None, True),
        (3, 15.0, 1, 0.0, None, 50.0, None, 10.0, 80.0, False),
    ]
    sql = _sql_over("gpu_sample_stats", {"sample_flags": flags}, t)
    assert_frame_equal(got.sort("alloc_id"), sql.sort("alloc_id"))
    empty = allocation_sums.gpu_sample_stats(allocation_sums.compute(flags.clear(), t))
    assert empty.schema == got.schema


def test_checkpoint_hand_computed() -> None:
    """Hand-computed: an idle first stretch is not a dip, nor is an idle stretch after the last
    busy sample; dips at 60, 105 and 135 s are 3 dips spaced 45 and 30 s, spread 15 / 37.5 =
    0.4; one dip gives no spacing; the job checkpoints only when 0.4 is under the tolerance.
    The SQL gives the same rows."""
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    utils = [0.0, 0.0, 50.0, 0.0, 50.0, 50.0, 0.0, 50.0, 0.0, 50.0, 0.0]  # at 15, 30, ... 165 s
    rows = [(7, 15 * (i + 1), u, utils[i - 1] if i else None) for i, u in enumerate(utils)]
    rows += [(8, 15, 50.0, None), (8, 30, 0.0, 50.0), (8, 45, 50.0, 0.0)]  # one dip
    samples = pl.DataFrame(
        [(a, t0 + timedelta(seconds=s), u, p) for a, s, u, p in rows],
        schema={
            "alloc_id": pl.Int64,
            "ts": pl.Datetime("us", "UTC"),
            "util": pl.Float64,
            "prev_util": pl.Float64,
        },
        orient="row",
    ).reverse()  # in any order
    alloc = pl.DataFrame({"alloc_id": [7, 8], "job_id": ["j7", "j8"]})
    sums = allocation_sums.compute(_flags(samples), Thresholds())
    assert allocation_sums.checkpoint_gpus(sums).rows() == [(7, 3, pytest.approx(0.4))]
    assert sums.select("alloc_id", "dips").sort("alloc_id").rows() == [(7, 3), (8, 1)]
    frames = {"job_samples": samples, "analyze_alloc": alloc}
    for tolerance, expected in ((0.5, [("j7", 1)]), (0.4, [])):
        t = Thresholds(checkpoint_min_dips=3, checkpoint_spacing_tolerance=tolerance)
        assert allocation_sums.checkpointing(sums, alloc, t).rows() == expected
        assert _sql_over("job_checkpoint", frames, t).rows() == expected
    per_gpu = _sql_over("job_checkpoint", frames, Thresholds(), "select * from per_gpu")
    assert per_gpu.rows() == [(7, 3, pytest.approx(0.4))]
    empty = allocation_sums.compute(_flags(samples.clear()), Thresholds())
    assert allocation_sums.checkpoint_gpus(empty).height == 0
    checkpointing = allocation_sums.checkpointing(empty, alloc, Thresholds())
    assert checkpointing.schema == allocation_sums.CHECKPOINT_SCHEMA


def test_idle_slots_hand_computed() -> None:
    """Hand-computed: an idle run stands from the start of its first sample's stretch to the end
    of its last one (with the tail); it must last strictly longer than `idle_slot_min_s` (60 s
    is not a slot at 60, 80 s is); a never-used GPU has none; one sample after a gap stands for
    nothing; seconds round to the microsecond as in SQL, and a duration is divided as DuckDB's
    epoch() divides (80.000003 s, where a multiplication by 1e-6 is one bit off). The SQL gives
    the same rows, to the bit. Memory readings under the floor do not matter to a slot."""
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    rows = [  # alloc_id, s, idle, run_start, run_end, covered_s, tail_covered_s, mem_used_mib
        (1, 15, False, True, True, 15.0, 0.0, 0.0),
        (1, 30, True, True, False, 14.9999996, 0.0, 0.0),  # opens at 15 s, to the microsecond
        (1, 45, True, False, False, 15.0, 0.0, 0.0),
        (1, 60, True, False, False, 15.0, 0.0, 0.0),
        (1, 75, True, False, True, 15.0, 0.0, 0.0),  # 15..75 s: 60 s
        (1, 90, False, True, False, 15.0, 0.0, 0.0),
        (1, 105, False, False, True, 15.0, 0.0, 0.0),
        (1, 120, True, True, False, 15.0, 0.0, 0.0),
        (1, 135, True, False, False, 15.0, 0.0, 0.0),
        (1, 150, True, False, False, 15.0, 0.0, 300.0),
        (1, 165, True, False, True, 15.0, 20.000003, 300.0),  # 105..185.000003 s with the tail
        (2, 15, True, True, False, 15.0, 0.0, 0.0),  # never used: no slot
        (2, 300, True, False, True, 15.0, 0.0, 0.0),
        (3, 100, True, True, True, 0.0, 0.0, None),  # after a gap: stands for nothing
        (3, 200, True, True, False, 0.0, 0.0, None),  # 200..230 s: 30 s
        (3, 215, True, False, False, 15.0, 0.0, None),
        (3, 230, True, False, True, 15.0, 0.0, None),
    ]
    flags = pl.DataFrame(
        [(a, t0 + timedelta(seconds=s), *rest) for a, s, *rest in rows],
        schema={
            "alloc_id": pl.Int64,
            "ts": pl.Datetime("us", "UTC"),
            "idle": pl.Boolean,
            "run_start": pl.Boolean,
            "run_end": pl.Boolean,
            "covered_s": pl.Float64,
            "tail_covered_s": pl.Float64,
            "mem_used_mib": pl.Float64,
        },
        orient="row",
    ).reverse()  # in any order
    stats = pl.DataFrame({"alloc_id": [1, 2, 3], "never_used": [False, True, False]})
    alloc = pl.DataFrame(
        [(i, f"j{i}", 0, "h1", i, None, t0, t0 + timedelta(seconds=400)) for i in (1, 2, 3)],
        schema=ALLOC_SCHEMA,
        orient="row",
    ).pipe(_devices)
    frames = {"sample_flags": flags, "gpu_sample_stats": stats, "analyze_alloc": alloc}
    at = [t0 + timedelta(seconds=s) for s in (15, 75, 105, 185.000003, 200, 230)]
    assert 80000003 * 1e-6 != 80000003 / 1e6  # the duration below tells the two apart
    slot = ("j1", at[2], at[3], 80.000003)
    for minimum, expected in (
        (60.0, [slot]),
        (20.0, [("j1", at[0], at[1], 60.0), slot, ("j3", *at[4:], 30.0)]),
    ):
        t = Thresholds(idle_slot_min_s=minimum)
        got = idle_slots.compute(flags, stats, alloc, t).sort(SLOT_KEYS)
        assert got.select("job_id", "start_ts", "end_ts", "duration_s").rows() == expected
        sql = _sql_over("idle_slots", frames, t).sort(SLOT_KEYS)
        assert_frame_equal(got, sql, check_exact=True)
    empty = idle_slots.compute(flags.clear(), stats, alloc, Thresholds())
    assert empty.height == 0 and empty.schema == got.schema


def test_util_hist_hand_computed() -> None:
    """Hand-computed: a minute falls in the bucket of its mean utilization, rounded down and
    kept within 0..100, and weighs its seconds of data times the device's gpu_weight; minutes
    without data weigh nothing; an allocation's rows need not be contiguous; a minute steady
    at 30 % whose sub-second weights divide to just under 30 is in bucket 30."""
    weights = [11.343642, 18.474337, 17.637746, 12.55069]  # seconds of four samples at 30 %
    steady = (sum(30.0 * w for w in weights), sum(weights))
    assert steady[0] / steady[1] < 30.0  # 29.999999999999996
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    rows = [  # alloc_id, seconds since start, minute, util, covered_s
        (1, 60, 0.0, 10.0, 60.0),  # 10.0: bucket 10, 1 GPU-minute
        (1, 120, 1.0, 59.9, 60.0),  # bucket 59
        (3, 60, 0.0, 20.0, 60.0),  # j2, 20.0
        (1, 150, 2.0, 101.0, 30.0),  # 101: bucket 100, half a minute
        (1, 240, 3.0, 0.0, 0.0),  # no data
        (2, 60, 0.0, 10.0, 60.0),  # j1 on a quarter of a GPU: 0.25 GPU-minutes in bucket 10
        (3, 120, 1.0, 20.0, 60.0),  # j2 again, after other rows
    ]
    rows += [(4, 10 + 15 * i, 0.0, 30.0, w) for i, w in enumerate(weights)]  # j3: steady at 30 %
    flags = _flags(
        pl.DataFrame(
            [(a, t0 + timedelta(seconds=s), m, u, c) for a, s, m, u, c in rows],
            schema=["alloc_id", "ts", "minute", "util", "covered_s"],
            orient="row",
        )
    )
    alloc = pl.DataFrame(
        {
            "alloc_id": [1, 2, 3, 4],
            "job_id": ["j1", "j1", "j2", "j3"],
            "gpu_weight": [1.0, 0.25, 1.0, 1.0],
        }
    )
    buckets = allocation_sums.util_buckets(flags)
    got = allocation_sums.util_hist(buckets, alloc).sort("job_id", "bucket")
    assert got.rows() == [
        ("j1", 10, 1.25),
        ("j1", 59, 1.0),
        ("j1", 100, 0.5),
        ("j2", 20, 2.0),
        ("j3", 30, pytest.approx(sum(weights) / 60)),
    ]
    assert allocation_sums.util_hist(buckets.clear(), alloc).schema == got.schema


def test_fluctuation_hand_computed() -> None:
    """Hand-computed: a window's utilization ranges over every sample in it, across its minutes
    (95 points fluctuates, 90 does not: more than `fluctuation_range_pct`); a job counts the
    windows of all its GPUs."""
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    rows = [  # alloc_id, seconds since start, window_no, minute, util
        (1, 0, 0.0, 0.0, 0.0),
        (1, 30, 0.0, 0.0, 50.0),
        (3, 0, 0.0, 0.0, 20.0),  # allocation 3: 20..30, no
        (1, 60, 0.0, 1.0, 10.0),
        (1, 90, 0.0, 1.0, 95.0),  # window 0 of allocation 1: 0..95, fluctuates
        (1, 120, 1.0, 2.0, 5.0),
        (1, 150, 1.0, 2.0, 95.0),
        (1, 180, 1.0, 3.0, 50.0),
        (1, 210, 1.0, 3.0, 60.0),  # window 1: 5..95, 90: no
        (2, 0, 0.0, 0.0, 0.0),
        (2, 30, 0.0, 0.0, 100.0),  # 0..100: fluctuates
        (3, 30, 0.0, 0.0, 30.0),
    ]
    flags = _flags(
        pl.DataFrame(
            [(a, t0 + timedelta(seconds=s), w, m, u) for a, s, w, m, u in rows],
            schema=["alloc_id", "ts", "window_no", "minute", "util"],
            orient="row",
        )
    )
    alloc = pl.DataFrame({"alloc_id": [1, 2, 3], "job_id": ["j1", "j1", "j2"]})
    t = Thresholds(fluctuation_range_pct=90.0)
    sums = allocation_sums.compute(flags, t)
    got = allocation_sums.fluctuation(sums, alloc).sort("job_id")
    assert got.rows() == [("j1", 3, 2), ("j2", 1, 0)]
    assert allocation_sums.fluctuation(sums.clear(), alloc).schema == got.schema


def test_the_interval_is_duckdbs_median_spacing() -> None:
    """Hand-computed: without a configured interval, an allocation's interval is the median of
    its spacings as DuckDB's median() gives it, the mean of the two middle ones: (a + b) / 2 =
    44.857685499999995 for 8.564917 and 81.150454 s, where a + (b - a) / 2 (polars' median) is
    44.8576855; an odd count takes the middle one; the first sample and repeated timestamps are
    left out; an allocation whose rows are split is put together first; one without spacings
    takes the fallback. The SQL gives the same intervals, to the bit."""
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    rows = [  # alloc_id, microseconds since t0, dt_s, is_first
        (1, 5_000_000, 5.0, True),
        (1, 13_564_917, 8.564917, False),
        (3, 1_000_000, 1.0, True),
        (1, 94_715_371, 81.150454, False),
        (3, 16_000_000, 15.0, False),
        (3, 16_000_000, 0.0, False),  # a repeated timestamp
        (3, 36_000_000, 20.0, False),
        (3, 51_000_000, 15.0, False),
        (2, 7_000_000, 7.0, True),
    ]
    frame = pl.DataFrame(
        [(a, t0 + timedelta(microseconds=us), dt, first) for a, us, dt, first in rows],
        schema={
            "alloc_id": pl.Int64,
            "ts": pl.Datetime("us", "UTC"),
            "dt_s": pl.Float64,
            "is_first": pl.Boolean,
        },
        orient="row",
    )
    t = Thresholds(fallback_interval_s=30.0)
    got = frame.with_columns(sample_flags._interval(frame, t).alias("interval_s"))
    per_alloc = dict(got.select("alloc_id", "interval_s").unique().iter_rows())
    assert per_alloc == {1: (8.564917 + 81.150454) / 2, 2: 30.0, 3: 15.0}
    assert per_alloc[1] != 8.564917 + (81.150454 - 8.564917) / 2
    sql = _sql_over("gpu_intervals", {"job_samples": frame}, t)
    assert dict(sql.iter_rows()) == per_alloc
