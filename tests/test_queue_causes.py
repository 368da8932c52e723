"""Queueing causes, out-of-order starts and waiting behind idle GPUs (docs/definitions.md#queueing-causes),
on hand-computed clusters: the summaries' SQL run by the registry over tables built here."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pytest
from typer.testing import CliRunner

from gpuwaste.analyses.registry import BY_NAME, drop_staging_tables, make_staging_tables
from gpuwaste.analyses.sqlfiles import set_variables
from gpuwaste.cli import app
from gpuwaste.warehouse.mig import MODEL_PROFILES, parse_profile
from gpuwaste.warehouse.results import ALL_MODELS, ALL_VCS
from gpuwaste.warehouse.store import Warehouse

T0 = datetime(2026, 11, 1, tzinfo=UTC)
CLUSTER = "c"


TS = pl.Datetime("us", "UTC")
_INTERVAL = {"start_ts": TS, "end_ts": TS}
_DEVICE = {"cluster": pl.String, "job_id": pl.String, "attempt": pl.Int64, "host": pl.String}
_DEVICE |= {"gpu": pl.Int64, "gpu_instance": pl.Int16}
EMPTY: dict[str, dict[str, Any]] = {  # the columns the queue analyses read, for empty tables
    "idle_slots": _DEVICE | _INTERVAL,
    "job_gpu_usage": _DEVICE
    | _INTERVAL
    | {"gpu_weight": pl.Float64, "never_used": pl.Boolean}
    | {"alloc_s": pl.Float64, "never_used_s": pl.Float64},
    "gpu_samples": {"cluster": pl.String, "host": pl.String, "gpu": pl.Int64},
}


def at(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


class Cluster:
    """Jobs and their allocations, written as the result tables the queue analyses read."""

    def __init__(self) -> None:
        self.jobs: list[dict[str, Any]] = []
        self.gpus: list[dict[str, Any]] = []
        self.slots: list[dict[str, Any]] = []
        self.hosts: list[dict[str, Any]] = []
        self.untied_rows: list[dict[str, Any]] = []  # job_gpus rows of no known GPU (gpu -1)

    def host(self, name: str, gpus: int) -> None:
        self.hosts += [{"cluster": CLUSTER, "host": name, "gpu": g} for g in range(gpus)]

    def _usage(self, job_id: str, submit: float, n: float, user: str, vc: str) -> None:
        size = "1" if n <= 1 else "2-4" if n <= 4 else "5-8" if n <= 8 else ">8"
        self.jobs.append(
            {
                "cluster": CLUSTER,
                "job_id": job_id,
                "user": user,
                "vc": vc,
                "gpu_model": "m",
                "size_class": size,
                "submit_ts": at(submit),
                "gpus": n,
            }
        )

    def untied(
        self,
        job_id: str,
        submit: float,
        hosts: list[str],
        gpus: int,
        start: float,
        end: float | None,
        *,
        user: str = "u",
        vc: str = "v",
        mig_profile: str | None = None,
        attempt: int = 1,
    ) -> None:
        """A job as Slurm's sacct alone shows it: its GPU count (AllocTRES) and hosts (NodeList),
        one job_gpus row per host with GPU index -1 (end None: still running)."""
        if attempt == 1:
            self._usage(job_id, submit, gpus, user, vc)
        for host in hosts:
            self.untied_rows.append(
                {
                    "cluster": CLUSTER,
                    "job_id": job_id,
                    "attempt": attempt,
                    "host": host,
                    "gpu": -1,
                    "gpu_instance": None,
                    "mig_profile": mig_profile,
                    "start_ts": at(start),
                    "end_ts": None if end is None else at(end),
                }
            )

    def job(
        self,
        job_id: str,
        submit: float,
        layout: dict[str, list[int]],
        start: float,
        end: float,
        *,
        user: str = "u",
        vc: str = "v",
        attempt: int = 1,
        never_used: bool = False,
        weight: float = 1.0,
    ) -> None:
        if attempt == 1:
            self._usage(job_id, submit, sum(len(g) for g in layout.values()), user, vc)
        for host, gpus in layout.items():
            for g in gpus:
                self.gpus.append(
                    {
                        "cluster": CLUSTER,
                        "job_id": job_id,
                        "attempt": attempt,
                        "host": host,
                        "gpu": g,
                        "gpu_instance": None,
                        "gpu_weight": weight,
                        "start_ts": at(start),
                        "end_ts": at(end),
                        "never_used": never_used,
                        "alloc_s": end - start,
                        "never_used_s": end - start if never_used else 0.0,
                    }
                )

    def idle_slot(self, job_id: str, host: str, gpu: int, start: float, end: float) -> None:
        self.slots.append(
            {
                "cluster": CLUSTER,
                "job_id": job_id,
                "attempt": 1,
                "host": host,
                "gpu": gpu,
                "gpu_instance": None,
                "start_ts": at(start),
                "end_ts": at(end),
            }
        )

    def analyze(
        self,
        quotas: dict[str, float] | None = None,
        as_of: float | None = None,
        threads: int | None = None,
        staged: bool = False,
    ) -> dict[str, pl.DataFrame]:
        """Run the three queue analyses as `gpuwaste analyze` does (each after those it reads);
        their staging queries temp views, or (staged) temp tables made before the first reader
        and dropped after the last, as analyze makes them."""
        con = duckdb.connect()
        if threads is not None:
            con.sql(f"set threads = {threads}")
        con.register(
            "job_gpus",
            pl.DataFrame(self.untied_rows, schema=_DEVICE | {"mig_profile": pl.String} | _INTERVAL),
        )
        tables = {
            "job_usage": self.jobs,
            "job_gpu_usage": self.gpus,
            "gpu_samples": self.hosts,
            "idle_slots": self.slots,
        }
        schema = {"gpu_instance": pl.Int16, "start_ts": pl.Datetime("us", "UTC")}
        for name, rows in tables.items():
            if rows:
                frame = pl.DataFrame(rows, schema_overrides=schema, infer_schema_length=None)
            else:  # a table with no rows still has its columns
                frame = pl.DataFrame(schema=EMPTY[name])
            con.register(name, frame)
        variables: dict[str, Any] = {"cluster": CLUSTER}
        if as_of is not None:
            variables["as_of"] = at(as_of)
        if quotas:
            variables |= {"vc_quota_names": list(quotas), "vc_quota_gpus": list(quotas.values())}
        set_variables(con, variables)
        out = {}
        for name in ("queue_causes", "queue_cause_summary", "queue_idle_overlap"):
            if staged:
                make_staging_tables(con, name)
            out[name] = BY_NAME[name].compute(con)
            if staged:
                drop_staging_tables(con, name)
            con.register(name, out[name].with_columns(pl.lit(CLUSTER).alias("cluster")))
        return out


def stretch(out: dict[str, pl.DataFrame], job_id: str, attempt: int = 1) -> dict[str, Any]:
    rows = out["queue_causes"].filter((pl.col("job_id") == job_id) & (pl.col("attempt") == attempt))
    assert rows.height == 1
    return rows.row(0, named=True)


def five_hosts_half_held(held_per_host: int = 4, filler_vc: str = "v") -> Cluster:
    """5 hosts of 8 GPUs; a filler job holds `held_per_host` GPUs on each from 0 to 1000 s; a
    16-GPU job (2 hosts x 8 as it ran) submitted at 100 s starts at 1000 s."""
    c = Cluster()
    for h in range(5):
        c.host(f"h{h}", 8)
    c.job(
        "filler",
        0,
        {f"h{h}": list(range(held_per_host)) for h in range(5)},
        0,
        1000,
        vc=filler_vc,
    )
    c.job("big", 100, {"h0": list(range(8)), "h1": list(range(8))}, 1000, 2000)
    return c


def test_16_gpus_waiting_while_20_are_free_in_4_gpu_pieces_is_fragmentation() -> None:
    out = five_hosts_half_held().analyze()
    big = stretch(out, "big")
    assert big["wait_s"] == 900
    assert big["cause"] == "fragmentation"
    assert big["fragmentation_s"] == 900
    assert big["capacity_s"] == big["fair_share_s"] == big["other_s"] == 0
    assert (big["gpus"], big["hosts"], big["per_host"]) == (16, 2, 8)


def test_the_same_job_while_its_vc_is_over_quota_is_fair_share() -> None:
    out = five_hosts_half_held().analyze(quotas={"v": 16})
    big = stretch(out, "big")
    assert big["cause"] == "fair-share"
    assert big["fair_share_s"] == 900
    assert big["vc_quota"] == 16
    # another VC's use does not count against this VC's quota
    out = five_hosts_half_held(filler_vc="w").analyze(quotas={"v": 16, "w": 40})
    assert stretch(out, "big")["cause"] == "fragmentation"


def test_fewer_free_gpus_than_asked_is_capacity() -> None:
    out = five_hosts_half_held(held_per_host=6).analyze()  # 10 free
    big = stretch(out, "big")
    assert (big["cause"], big["capacity_s"]) == ("capacity", 900)


def test_a_job_without_a_submit_time_still_occupies_its_gpus() -> None:
    """The filler's submit time is unknown (it cannot wait, but it holds 6 GPUs on each host):
    the 16-GPU job still waits for capacity, and for fair-share over its VC's quota."""
    c = five_hosts_half_held(held_per_host=6)
    c.jobs[0]["submit_ts"] = None
    assert stretch(c.analyze(), "big")["cause"] == "capacity"
    assert stretch(c.analyze(quotas={"v": 40}), "big")["cause"] == "capacity"
    assert stretch(c.analyze(quotas={"v": 30}), "big")["cause"] == "fair-share"


def test_a_stretch_is_cut_where_occupancy_changes() -> None:
    """10 GPUs free until 400 s (capacity), then 20 in 4-GPU pieces (fragmentation)."""
    c = five_hosts_half_held()
    c.job("more", 0, {f"h{h}": [4, 5] for h in range(5)}, 0, 400)
    big = stretch(c.analyze(), "big")
    assert (big["capacity_s"], big["fragmentation_s"]) == (300, 600)
    assert big["cause"] == "fragmentation"  # most of its seconds


def test_equal_stretches_of_one_class_are_counted_once_whatever_the_threads() -> None:
    """Jobs of one class submitted and started together wait the same stretch. 1000 rounds, each
    3 classes (1, 2, 3 GPUs) x 3 such jobs submitted at 100 i s, started 60 s later on an empty
    host: each waited 60 s, all 'other'. Equal stretches once came in another order in the two
    windows that merge stretches into spans, and a span then stretched over the next one's
    stretch, counting its seconds twice, in most runs with 8 threads (never with 1)."""
    c = Cluster()
    c.host("h0", 8)
    for i in range(1000):
        for g in (1, 2, 3):
            for j in range(3):
                c.job(f"t{i}-{g}-{j}", 100 * i, {"h0": list(range(g))}, 100 * i + 60, 100 * i + 70)
    for _ in range(3):
        out = c.analyze(threads=8)["queue_causes"]
        assert out.height == 9000
        assert out.filter(
            (pl.col("wait_s") != 60) | (pl.col("other_s") != 60) | (pl.col("cause") != "other")
        ).is_empty()


def sacct_only() -> Cluster:
    """Two hosts seen only through sacct (no telemetry, no GPU index): "full0" and "full1" each
    hold a whole host of 8 GPUs from 0 to 100 s (so the data shows 8 GPUs on each); "half" holds
    8 GPUs on both hosts (4 each) from 100 to 1000 s; "eight" (8 GPUs on one host, submitted at
    150 s) and "big" (16 GPUs on both, submitted at 50 s) start at 1000 s and 2000 s."""
    c = Cluster()
    c.untied("full0", 0, ["h0"], 8, 0, 100)
    c.untied("full1", 0, ["h1"], 8, 0, 100)
    c.untied("half", 0, ["h0", "h1"], 8, 100, 1000)
    c.untied("eight", 150, ["h1"], 8, 1000, 2000)
    c.untied("big", 50, ["h0", "h1"], 16, 2000, 3000)
    return c


def test_a_cluster_seen_through_sacct_alone_has_causes_from_gpu_counts_and_hosts() -> None:
    """Capacity 16 (the most each host held at once). "eight" waits 150-1000 s with 8 GPUs free
    as 4 + 4: fragmentation 850 s. "big" waits 50-100 s (nothing free), 100-1000 s (8 free) and
    1000-2000 s ("eight" holds h1): capacity 1950 s."""
    out = sacct_only().analyze()
    eight = stretch(out, "eight")
    assert (eight["cause"], eight["fragmentation_s"], eight["wait_s"]) == (
        "fragmentation",
        850,
        850,
    )
    assert (eight["gpus"], eight["hosts"], eight["per_host"]) == (8, 1, 8)
    big = stretch(out, "big")
    assert (big["cause"], big["capacity_s"], big["wait_s"]) == ("capacity", 1950, 1950)
    assert (big["gpus"], big["hosts"], big["per_host"]) == (16, 2, 8)
    assert out["queue_causes"].height == 5  # every start is a decision, waited or not


def test_telemetry_showing_more_gpus_than_were_ever_held_raises_capacity() -> None:
    """The same jobs, with telemetry of 12 GPUs on h0: 'eight' fits on h0's 8 free GPUs from
    150 s, its wait is no longer fragmentation."""
    c = sacct_only()
    c.host("h0", 12)
    out = c.analyze()
    assert stretch(out, "eight")["cause"] == "other"


def test_a_job_resolved_by_telemetry_labels_is_counted_once() -> None:
    """The filler's job_gpus rows say index unknown, but telemetry labels resolved them (its
    devices are in job_gpu_usage): its GPUs occupy the cluster once, the wait stays
    fragmentation (counted twice, nothing would be free: capacity)."""
    c = five_hosts_half_held()
    c.untied("filler", 0, [f"h{h}" for h in range(5)], 20, 0, 1000)
    c.jobs.pop()  # one job: its job_usage row is there
    big = stretch(c.analyze(), "big")
    assert (big["cause"], big["fragmentation_s"]) == ("fragmentation", 900)


def test_a_running_job_seen_through_sacct_holds_its_gpus_until_as_of() -> None:
    """ "run" (8 GPUs on h0, no end) runs from 0 s; the data reach 500 s. "w" (8 GPUs, submitted
    at 100 s, started at 600 s on h1 after "f" there ended) waited for capacity 100-500 s, then
    400-600 s: nothing held h0 after as_of, so other."""
    c = Cluster()
    c.untied("run", 0, ["h0"], 8, 0, None)
    c.untied("f", 0, ["h1"], 8, 0, 600)
    c.untied("w", 100, ["h1"], 8, 600, 700)
    w = stretch(c.analyze(as_of=500), "w")
    assert (w["capacity_s"], w["other_s"]) == (400, 100)


def test_report_since_keeps_a_running_job_seen_through_sacct(data_dir: Path) -> None:
    """The same as `gpuwaste report queue_causes` recomputed `--since` a time before every job:
    "run" (8 GPUs on h0 after "early" there, no end; sacct alone) holds h0 up to as_of, the
    analyze's (the last job event, 700 s), so "w" waited for capacity 100-600 s either way (with
    as_of unset, the recomputation dropped "run": h0 free, other)."""
    jobs = [("early", 0, 50, "h0"), ("run", 50, None, "h0"), ("f", 0, 600, "h1")]
    jobs.append(("w", 600, 700, "h1"))
    submit = {"w": 100.0}
    frame = pl.DataFrame(
        [
            {"job_id": j, "start_ts": at(s), "end_ts": None if e is None else at(e), "host": h}
            for j, s, e, h in jobs
        ],
        schema_overrides=_INTERVAL,
    )
    wh = Warehouse(data_dir)
    wh.upsert(
        "jobs",
        CLUSTER,
        "t",
        frame.drop("host").with_columns(
            user=pl.lit("u"),
            vc=pl.lit("v"),
            state=pl.lit("passed"),
            gpus=pl.lit(8),
            submit_ts=pl.Series([at(submit.get(j, 0)) for j, *_ in jobs]),
        ),
    )
    wh.upsert("job_gpus", CLUSTER, "t", frame.with_columns(attempt=pl.lit(0), gpu=pl.lit(-1)))
    runner = CliRunner()
    assert runner.invoke(app, ["analyze", "--data-dir", str(data_dir)]).exit_code == 0
    args = ["report", "queue_causes", "--data-dir", str(data_dir), "--format", "json"]
    stored = json.loads(runner.invoke(app, args).stdout)
    since = json.loads(runner.invoke(app, [*args, "--since", at(0).isoformat()]).stdout)
    w = next(r for r in stored if r["job_id"] == "w")
    assert (w["cause"], w["capacity_s"]) == ("capacity", 500)
    assert since == stored


def test_mig_capacity_is_counted_by_slice() -> None:
    """Host m has one A100 split into MIG instances (telemetry shows GPU 0, instances 1 and 2):
    capacity 1 GPU, not 2 instances. "a" holds a 4g.40gb (4/7) from 0 to 1000 s; "b" (4g.40gb,
    submitted at 50 s) starts at 1000 s: 3/7 free, less than its 4/7, capacity 950 s; "c"
    (3g.40gb, submitted at 100 s) starts at 200 s: it fitted, other 100 s. The same jobs seen
    through sacct alone (gres/gpu:4g.40gb=1, no index): the same causes, capacity from the
    most held at once (4/7 + 3/7: one GPU)."""
    tied = Cluster()
    tied.hosts += [{"cluster": CLUSTER, "host": "m", "gpu": 0, "gpu_instance": i} for i in (1, 2)]
    tied.job("a", 0, {"m": [0]}, 0, 1000, weight=4 / 7)
    tied.job("b", 50, {"m": [0]}, 1000, 2000, weight=4 / 7)
    tied.job("c", 100, {"m": [0]}, 200, 2000, weight=3 / 7)
    untied = Cluster()
    untied.untied("a", 0, ["m"], 1, 0, 1000, mig_profile="4g.40gb")
    untied.untied("b", 50, ["m"], 1, 1000, 2000, mig_profile="4g.40gb")
    untied.untied("c", 100, ["m"], 1, 200, 2000, mig_profile="3g.40gb")
    for c in (tied, untied):
        out = c.analyze()
        b, cc = stretch(out, "b"), stretch(out, "c")
        assert (b["cause"], b["capacity_s"]) == ("capacity", 950)
        assert b["gpus"] == pytest.approx(4 / 7) and b["per_host"] == pytest.approx(4 / 7)
        assert (cc["cause"], cc["other_s"]) == ("other", 100)


def test_a_slice_that_exactly_fits_the_free_share_waits_for_other() -> None:
    """Host h has 3 GPUs: "w" holds GPUs 0 and 1, "a" 6/7 of GPU 2 (MIG), from 0 to 1000 s; "b"
    (1/7, submitted at 100 s) starts at 1000 s. 1/7 GPU was free, exactly its share: not
    capacity but other (3 - 0.857143 is 0.14285699999999998 in floating point, below 0.142857,
    unless the free GPUs are rounded as the occupancy is)."""
    c = Cluster()
    c.host("h", 3)
    c.job("w", 0, {"h": [0, 1]}, 0, 1000)
    c.job("a", 0, {"h": [2]}, 0, 1000, weight=6 / 7)
    c.job("b", 100, {"h": [2]}, 1000, 2000, weight=1 / 7)
    b = stretch(c.analyze(), "b")
    assert (b["cause"], b["other_s"], b["capacity_s"]) == ("other", 900, 0)


def test_an_allocation_without_devices_weighs_its_mig_profile_as_warehouse_mig_does() -> None:
    """queue_wait_pieces.sql's weight of a MIG allocation no device names is the rule of
    warehouse/mig.py (and staging/alloc_intervals.sql): every known profile, suffixes, A30's
    4-slice profiles, and no profile (a whole GPU)."""
    names = sorted({p for ps in MODEL_PROFILES.values() for p in ps})
    names += ["1g.10gb+me", "1g.5gb-me", "4g.24gb", "7g.141gb"]
    c = Cluster()
    for i, name in enumerate([*names, None]):
        c.untied(f"j{i:03d}", 0, [f"h{i}"], 1, 0, 100, mig_profile=name)
    got = c.analyze()["queue_causes"].sort("job_id")["gpus"].to_list()
    want = [parse_profile(n).weight for n in names] + [1.0]  # type: ignore[union-attr]
    assert got == pytest.approx(want, abs=1e-6)


def test_summary_in_table_2_layout_says_whether_fair_share_was_judged() -> None:
    c = five_hosts_half_held()
    c.job("more", 0, {f"h{h}": [4, 5] for h in range(5)}, 0, 400)
    for quotas, judged in ((None, False), ({"v": 100}, True)):
        s = c.analyze(quotas)["queue_cause_summary"].filter(
            (pl.col("vc") == ALL_VCS) & (pl.col("gpu_model") == ALL_MODELS)
        )
        big = {r["cause"]: r for r in s.filter(pl.col("size_class") == ">8").iter_rows(named=True)}
        assert set(big) == {"fair-share", "fragmentation", "capacity", "other"}
        assert big["fragmentation"]["stretches"] == 1
        assert big["fragmentation"]["stretches_pct"] == 100
        assert big["fragmentation"]["wait_pct"] == pytest.approx(100 * 600 / 900)
        assert big["capacity"]["wait_pct"] == pytest.approx(100 * 300 / 900)
        assert big["capacity"]["stretches"] == 0
        assert all(r["fair_share_judged"] is judged for r in big.values())
        assert big["other"]["decisions"] == 3  # filler (20 GPUs), more (10), big


def test_fractional_seconds_are_summed_exactly() -> None:
    """Ten waits of 0.1 s (a float sum of ten 0.1 is 0.9999999999999999, and in whatever order
    the threads add them): each stretch's cause seconds and the summary's sums are exact."""
    c = Cluster()
    c.host("h0", 8)
    for i in range(10):
        c.job(f"j{i}", 100 * i, {"h0": [0]}, 100 * i + 0.1, 100 * i + 50)
    out = c.analyze()
    assert out["queue_causes"]["other_s"].to_list() == [0.1] * 10
    s = out["queue_cause_summary"].filter(
        (pl.col("vc") == ALL_VCS)
        & (pl.col("gpu_model") == ALL_MODELS)
        & (pl.col("size_class") == "all")
        & (pl.col("cause") == "other")
    )
    assert s.select("cause_wait_s", "wait_s", "wait_pct").row(0) == (1.0, 1.0, 100.0)


def test_out_of_order_share_by_hand() -> None:
    """One host of 8 GPUs. X holds all 8 until 100 s. A (4 GPUs, submitted at 10 s) and B (4 GPUs,
    submitted at 20 s) wait; at 100 s B starts while A, submitted earlier and fitting B's GPUs,
    still waits (until 200 s). Decisions: X, B, A; out of order: B. C (8 GPUs, submitted at 5 s,
    starts at 300 s) is earlier but would not fit B's 4 GPUs: it makes no start out of order."""
    c = Cluster()
    c.host("h", 8)
    c.job("X", 0, {"h": list(range(8))}, 0, 100)
    c.job("A", 10, {"h": [0, 1, 2, 3]}, 200, 300)
    c.job("B", 20, {"h": [4, 5, 6, 7]}, 100, 300)
    c.job("C", 5, {"h": list(range(8))}, 300, 400)
    out = c.analyze()
    ooo = dict(out["queue_causes"].select("job_id", "out_of_order").iter_rows())
    assert ooo == {"X": False, "A": False, "B": True, "C": False}
    s = out["queue_cause_summary"].filter(
        (pl.col("vc") == ALL_VCS) & (pl.col("gpu_model") == ALL_MODELS)
    )
    row = s.filter(pl.col("size_class") == "all").row(0, named=True)
    assert row["decisions"] == 4
    assert row["out_of_order_pct"] == pytest.approx(25.0)


def test_a_job_waiting_for_fair_share_makes_no_start_out_of_order() -> None:
    c = Cluster()
    c.host("h", 8)
    c.job("X", 0, {"h": list(range(8))}, 0, 100, vc="a")
    c.job("A", 10, {"h": [0, 1, 2, 3]}, 200, 300, vc="a")  # VC a holds >= its quota of 4
    c.job("B", 20, {"h": [4, 5, 6, 7]}, 100, 300, vc="a")
    out = c.analyze(quotas={"a": 4})
    assert not out["queue_causes"]["out_of_order"].any()
    # 10 s to 100 s X holds 8 of a's GPUs, 100 s to 200 s B holds 4: fair-share throughout
    assert stretch(out, "A")["fair_share_s"] == 190


def test_a_second_attempt_waits_from_the_first_ones_end() -> None:
    c = five_hosts_half_held(held_per_host=6)
    c.job("big", 100, {"h2": list(range(8)), "h3": list(range(8))}, 2500, 3000, attempt=2)
    out = c.analyze()
    second = stretch(out, "big", attempt=2)
    assert (second["wait_start"], second["wait_end"], second["wait_s"]) == (at(2000), at(2500), 500)
    assert second["cause"] == "other"  # the cluster was empty


def test_waiting_behind_idle_gpus_by_hand() -> None:
    """H (user u1) holds 2 GPUs from 0 to 1000 s: GPU 0 has an idle slot 100-400 s, GPU 1 is never
    used. W (user u2, 4 GPUs, same VC) waits 200-600 s for capacity (6 GPUs). Idle inside W's wait:
    GPU 0 200-400 s (200 GPU-s), GPU 1 200-600 s (400 GPU-s): 600 GPU-s, all of which kept it
    waiting (it waited 4 x 400 = 1600 GPU-s)."""
    c = Cluster()
    c.host("h", 6)
    c.job("H", 0, {"h": [0]}, 0, 1000, user="u1")
    c.job("H", 0, {"h": [1]}, 0, 1000, user="u1", never_used=True)
    c.jobs.pop()  # one job, two GPUs
    c.idle_slot("H", "h", 0, 100, 400)
    c.job("W", 200, {"h": [2, 3, 4, 5]}, 600, 900, user="u2")
    c.job("F", 0, {"h": [2, 3]}, 0, 600, user="u3")  # busy: not idle
    out = c.analyze()
    overlap = out["queue_idle_overlap"]
    assert overlap.height == 1
    row = overlap.row(0, named=True)
    assert (row["job_id"], row["user"], row["holder_user"]) == ("W", "u2", "u1")
    assert row["idle_gpu_s"] == 600
    assert row["blocked_gpu_s"] == 600
    assert row["same_vc"] and not row["same_user"]
    assert stretch(out, "W")["cause"] == "capacity"


def test_blocked_gpu_seconds_never_exceed_the_wait() -> None:
    """8 idle GPUs for 100 s behind a 1-GPU job's 100 s wait: 800 idle GPU-s, 100 blocked."""
    c = Cluster()
    c.host("h", 9)
    c.job("H", 0, {"h": list(range(8))}, 0, 1000, user="u1", never_used=True)
    c.job("F", 0, {"h": [8]}, 0, 200, user="u3")
    c.job("W", 100, {"h": [8]}, 200, 300, user="u2")
    row = c.analyze()["queue_idle_overlap"].row(0, named=True)
    assert (row["idle_gpu_s"], row["blocked_gpu_s"]) == (800, 100)


def test_idle_gpus_elsewhere_keep_no_job_waiting_while_there_was_room_for_it() -> None:
    """The reviewer's case: 9 GPUs, 8 held idle by another user, a 1-GPU job waits 100-200 s
    while GPU 8 is free: its cause is `other` (room was there), 800 idle GPU-s, none blocked."""
    c = Cluster()
    c.host("h", 9)
    c.job("H", 0, {"h": list(range(8))}, 0, 1000, user="u1", never_used=True)
    c.job("W", 100, {"h": [8]}, 200, 300, user="u2")
    out = c.analyze()
    assert stretch(out, "W")["cause"] == "other"
    row = out["queue_idle_overlap"].row(0, named=True)
    assert (row["idle_gpu_s"], row["blocked_gpu_s"]) == (800, 0)


def test_only_the_capacity_part_of_a_wait_is_kept_waiting_by_idle_gpus() -> None:
    """9 GPUs, 8 held idle by u1 from 0 to 1000 s; F holds GPU 8 until 200 s; W (1 GPU) waits
    100-300 s: capacity 100-200 s, other 200-300 s. Idle inside the wait 8 x 200 = 1600 GPU-s;
    blocked only in the capacity piece: least(8, 1) x 100 s = 100 GPU-s (the old rule: 200)."""
    c = Cluster()
    c.host("h", 9)
    c.job("H", 0, {"h": list(range(8))}, 0, 1000, user="u1", never_used=True)
    c.job("F", 0, {"h": [8]}, 0, 200, user="u3")
    c.job("W", 100, {"h": [8]}, 300, 400, user="u2")
    out = c.analyze()
    w = stretch(out, "W")
    assert (w["capacity_s"], w["other_s"]) == (100, 100)
    row = out["queue_idle_overlap"].row(0, named=True)
    assert (row["idle_gpu_s"], row["blocked_gpu_s"]) == (1600, 100)


def test_a_fair_share_wait_is_kept_waiting_only_by_its_own_vcs_idle_gpus() -> None:
    """10 GPUs; u1 (VC a) and u3 (VC b) each hold 4 idle GPUs from 0 to 1000 s; W (u2, VC a,
    quota 4, 2 GPUs) waits 100-300 s with 2 GPUs free: fair-share throughout. a's idle GPUs
    held its quota: least(4, 2) x 200 = 400 GPU-s; b's kept it waiting for nothing."""
    c = Cluster()
    c.host("h", 10)
    c.job("Ha", 0, {"h": [0, 1, 2, 3]}, 0, 1000, user="u1", vc="a", never_used=True)
    c.job("Hb", 0, {"h": [4, 5, 6, 7]}, 0, 1000, user="u3", vc="b", never_used=True)
    c.job("W", 100, {"h": [8, 9]}, 300, 400, user="u2", vc="a")
    out = c.analyze(quotas={"a": 4})
    assert stretch(out, "W")["cause"] == "fair-share"
    rows = out["queue_idle_overlap"].select("holder_vc", "same_vc", "idle_gpu_s", "blocked_gpu_s")
    assert sorted(rows.iter_rows()) == [("a", True, 800, 400), ("b", False, 800, 0)]


def test_analyzes_staging_tables_give_the_rows_of_the_views() -> None:
    """The fair-share case above and a wait of VC b's, with the staging queries made temp tables
    first as `gpuwaste analyze` makes them (queue_idle_overlap's holders and their idle
    GPU-seconds per span, each in its own query, one reading the other): the same rows in every
    table as over the views."""
    c = Cluster()
    c.host("h", 10)
    c.job("Ha", 0, {"h": [0, 1, 2, 3]}, 0, 1000, user="u1", vc="a", never_used=True)
    c.job("Hb", 0, {"h": [4, 5, 6, 7]}, 0, 1000, user="u3", vc="b", never_used=True)
    c.job("W", 100, {"h": [8, 9]}, 300, 400, user="u2", vc="a")
    c.job("W2", 150, {"h": [8]}, 400, 500, user="u1", vc="b")
    views = c.analyze(quotas={"a": 4})
    staged = c.analyze(quotas={"a": 4}, staged=True)
    for name, rows in views.items():
        assert staged[name].sort(pl.all()).equals(rows.sort(pl.all())), name
    rows = staged["queue_idle_overlap"].filter(pl.col("job_id") == "W")
    got = rows.select("holder_vc", "idle_gpu_s", "blocked_gpu_s").sort("holder_vc").rows()
    assert got == [("a", 800, 400), ("b", 800, 0)]


def test_a_never_used_gpu_with_half_its_time_observed_is_idle_half_the_time() -> None:
    c = Cluster()
    c.host("h", 2)
    c.job("H", 0, {"h": [0]}, 0, 1000, user="u1", never_used=True)
    c.gpus[-1]["never_used_s"] = 500.0  # samples for half of its allocation
    c.job("F", 0, {"h": [1]}, 0, 200, user="u3")
    c.job("W", 0, {"h": [1]}, 200, 300, user="u2")
    row = c.analyze()["queue_idle_overlap"].row(0, named=True)
    assert row["idle_gpu_s"] == 100  # 200 s of wait x half a GPU


def test_two_waits_behind_one_idle_gpu_share_it() -> None:
    """One never-used GPU from 0 to 1000 s; W1 and W2 (1 GPU each, other users) both wait from
    100 s to 300 s: the idle GPU could have served one of them, 200 GPU-s in all, 100 each."""
    c = Cluster()
    c.host("h", 3)
    c.job("H", 0, {"h": [0]}, 0, 1000, user="u1", never_used=True)
    c.job("F", 0, {"h": [1, 2]}, 0, 300, user="u3")
    c.job("W1", 100, {"h": [1]}, 300, 400, user="u2")
    c.job("W2", 100, {"h": [2]}, 300, 400, user="u4")
    overlap = c.analyze()["queue_idle_overlap"].filter(pl.col("holder_user") == "u1")
    assert dict(overlap.select("job_id", "idle_gpu_s").iter_rows()) == {"W1": 200, "W2": 200}
    assert dict(overlap.select("job_id", "blocked_gpu_s").iter_rows()) == {"W1": 100, "W2": 100}


def test_a_users_own_two_waits_behind_their_own_idle_gpu_share_it() -> None:
    """u1 holds one never-used GPU from 0 to 1000 s; u1's own W1 and W2 (1 GPU each) both wait
    from 100 s to 300 s for capacity: the idle GPU could have served one of them, 200 GPU-s of
    own waiting in all, 100 each (not 200 each); u2's W3 waiting then too is kept waiting the
    same idle GPU's 200 GPU-s, counted apart among other users' waits."""
    c = Cluster()
    c.host("h", 4)
    c.job("H", 0, {"h": [0]}, 0, 1000, user="u1", never_used=True)
    c.job("F", 0, {"h": [1, 2, 3]}, 0, 300, user="u3")
    c.job("W1", 100, {"h": [1]}, 300, 400, user="u1")
    c.job("W2", 100, {"h": [2]}, 300, 400, user="u1")
    c.job("W3", 100, {"h": [3]}, 300, 400, user="u2")
    overlap = c.analyze()["queue_idle_overlap"].filter(pl.col("holder_user") == "u1")
    rows = overlap.select("job_id", "same_user", "blocked_gpu_s").sort("job_id").rows()
    assert rows == [("W1", True, 100), ("W2", True, 100), ("W3", False, 200)]


def test_a_quota_that_is_not_a_positive_number_is_refused_naming_it() -> None:
    from gpuwaste.config import parse_settings
    from gpuwaste.errors import GpuwasteError

    ok = parse_settings({"clusters": [{"name": "p", "vc_quotas": {"research": 64}}]})
    assert ok.clusters[0].vc_quotas == {"research": 64.0}
    with pytest.raises(GpuwasteError, match=r"vc_quotas\.research"):
        parse_settings({"clusters": [{"name": "p", "vc_quotas": {"research": 0}}]})
