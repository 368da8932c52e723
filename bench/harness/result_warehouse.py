"""A result warehouse filled with plausible rows, for the dashboard's tests and benchmark.

`build_result_warehouse(data_dir, n_jobs=...)` writes the result tables the dashboard reads
(through `Warehouse.replace_file`): per job, per GPU, idle slots and phases, the summaries, the
queue's waiting stretches and waits behind idle GPUs, the failed attempts and Table 7 (those two
summaries computed by the analyses' own SQL files over the synthetic rows), `ingest_state`,
`quarantine`, and `gpu_samples` for a few "drill-down" jobs, for one cluster with a handful of
virtual clusters. Nothing here is a metric the dashboard relies on being *right*: the summary
tables are rolled up from the synthetic jobs so that they are consistent with them, which lets
tests compare what a page shows with what the builder wrote.

It is vectorized (numpy + polars) so that the same builder writes the 1 M-job warehouse of
bench/dashboard.py in seconds. Untrusted text is planted on purpose: a user and a job name with
HTML and control characters (`NASTY_USER`, `NASTY_NAME`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import duckdb
import numpy as np
import polars as pl

from gpuwaste.analyses.sqlfiles import load_sql, set_variables
from gpuwaste.ingest.logs.rules import shipped_rules
from gpuwaste.warehouse.catalog import refresh_catalog
from gpuwaste.warehouse.results import ALL_MODELS, ALL_VCS, ROLLUP_LABELS
from gpuwaste.warehouse.schema import conform, table
from gpuwaste.warehouse.store import Warehouse

NASTY_USER = "<b>mallory</b>\x1b[31m"
NASTY_NAME = "<script>alert('x')</script>\x07train"
KEY = "builder"
MODELS = ("NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3")  # the jobs' GPU models, in turn
STATES = ("passed", "killed", "unsuccessful")
START = datetime(2026, 10, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Built:
    """What was written, for tests to check pages against."""

    data_dir: Path
    cluster: str
    vcs: tuple[str, ...]
    jobs: pl.DataFrame  # job_usage as written (with cluster)
    drill_jobs: tuple[str, ...]  # jobs that have gpu_samples, idle slots and phases
    start: datetime
    end: datetime


def _size_class(g: pl.Expr) -> pl.Expr:
    return (
        pl.when(g == 1)
        .then(pl.lit("1"))
        .when(g <= 4)
        .then(pl.lit("2-4"))
        .when(g <= 8)
        .then(pl.lit("5-8"))
        .otherwise(pl.lit(">8"))
    )


def _jobs(
    rng: np.random.Generator,
    n: int,
    vcs: tuple[str, ...],
    start: datetime,
    days: float,
    models: tuple[str, ...] = MODELS,
) -> pl.DataFrame:
    """One row per job, with job_usage's columns (no cluster); job i is of models[i % len]."""
    window_s = days * 86400.0
    n_users = max(5, min(5000, n // 20))
    users = np.array([f"user{k:04d}" for k in range(n_users)], dtype=object)
    user = users[rng.zipf(1.6, n) % n_users]
    if n > 3:
        user[3] = NASTY_USER
    vc = np.array(vcs, dtype=object)[
        rng.choice(len(vcs), n, p=np.linspace(2, 1, len(vcs)) / np.linspace(2, 1, len(vcs)).sum())
    ]
    gpus = rng.choice([1, 2, 4, 8, 16, 3], n, p=[0.5, 0.12, 0.14, 0.14, 0.06, 0.04])
    is_debug = rng.random(n) < 0.12
    declared = is_debug & (rng.random(n) < 0.7)
    inferred = is_debug & ~declared
    submit_off = rng.random(n) * window_s * 0.95
    delay = rng.exponential(300.0, n) * (1 + gpus / 4)
    duration = np.minimum(rng.lognormal(8.0, 1.3, n), 5 * 86400.0)
    limit = 8 * 3600.0
    duration = np.where(is_debug, np.minimum(duration * 3, limit), duration)
    hit_limit = is_debug & (duration >= limit)
    start_off = submit_off + delay
    end_off = start_off + duration
    running = end_off >= window_s
    end_off = np.minimum(end_off, window_s)
    duration = np.maximum(end_off - start_off, 60.0)
    state = np.array(STATES, dtype=object)[rng.choice(3, n, p=[0.62, 0.24, 0.14])]
    state = np.where(running, "running", state)
    util = np.clip(rng.beta(1.3, 1.6, n) * 100, 0, 100)
    util = np.where(is_debug, util * 0.3, util)
    util_max = np.minimum(100.0, util + rng.random(n) * (100 - util))
    mem = np.clip(rng.beta(2.0, 2.5, n) * 100, 0, 100)
    mem_max = np.minimum(100.0, mem + rng.random(n) * (100 - mem))
    cpu = np.clip(rng.beta(1.2, 3.0, n) * 100, 0, 100)
    cpu_max = np.minimum(100.0, cpu + rng.random(n) * (100 - cpu))
    hmem = np.clip(rng.beta(2.0, 5.0, n) * 100, 0, 100)
    hmem_max = np.minimum(100.0, hmem + rng.random(n) * 20)
    gpu_s = gpus * duration
    never = np.where((gpus > 1) & (rng.random(n) < 0.12), rng.integers(1, 16, n) % gpus, 0)
    never = np.where((gpus > 1) & (never == 0) & (rng.random(n) < 0.05), 1, never)
    never_s = never * duration
    idle_frac = rng.beta(0.6, 4.0, n)
    idle_frac = np.where(is_debug, np.minimum(1.0, idle_frac + 0.5), idle_frac)
    idle_s = idle_frac * (gpu_s - never_s)
    idle_slots = np.where(idle_s > 60, 1 + rng.poisson(2.0, n), 0)
    n_hosts = np.where(gpus > 8, rng.choice([2, 4, 8], n, p=[0.6, 0.3, 0.1]), 1)
    n_phases = 1 + rng.poisson(1.5, n)
    n_stable = rng.binomial(n_phases, 0.5)
    diag_pool = np.array(
        ["", "", "", "improper_batch_size", "slow_start", "unreleased", "gpu_oversubscription"],
        dtype=object,
    )
    diagnoses = diag_pool[rng.integers(0, len(diag_pool), n)]
    diagnoses = np.where(never > 0, "gpu_oversubscription", diagnoses)
    name = np.array(["train", "eval", "finetune", "bash", "jupyter-lab", "sweep"], dtype=object)[
        rng.integers(0, 6, n)
    ]
    if n > 5:
        name[5] = NASTY_NAME
    base = np.datetime64(start.replace(tzinfo=None), "us")
    to_ts = lambda off: base + (off * 1e6).astype("timedelta64[us]")  # noqa: E731
    df = pl.DataFrame(
        {
            "job_id": [f"{100000 + i}" for i in range(n)],
            "user": user,
            "vc": vc,
            "gpu_model": [models[i % len(models)] for i in range(n)],
            "name": name,
            "state": state,
            "raw_state": state,
            "running": running,
            "gpus": gpus.astype(np.int64),
            "n_hosts": n_hosts.astype(np.int64),
            "is_debug": is_debug,
            "is_debug_declared": declared,
            "is_debug_inferred": inferred,
            "submit_ts": to_ts(submit_off),
            "start_ts": to_ts(start_off),
            "end_ts": to_ts(end_off),
            "duration_s": duration,
            "queue_delay_s": delay,
            "gpu_s": gpu_s,
            "observed_share": np.clip(1 - rng.beta(0.5, 20, n), 0, 1),
            "util_mean": util,
            "util_max": util_max,
            "mem_util_mean": mem,
            "mem_util_max": mem_max,
            "cpu_util_mean": cpu,
            "cpu_util_max": cpu_max,
            "host_mem_util_mean": hmem,
            "host_mem_util_max": hmem_max,
            "idle_slot_gpu_s": idle_s,
            "idle_slots": idle_slots.astype(np.int64),
            "never_used_gpu_s": never_s,
            "never_used_gpus": never.astype(np.int64),
            "idle_share": (idle_s + never_s) / gpu_s,
            "n_phases": n_phases.astype(np.int64),
            "n_stable_phases": n_stable.astype(np.int64),
            "phase_level_spread_mib": rng.exponential(2048, n),
            "fluctuating": rng.random(n) < 0.08,
            "hit_time_limit": hit_limit,
            "diagnoses": diagnoses,
        },
        strict=False,
    )
    return df.with_columns(
        pl.col("submit_ts", "start_ts", "end_ts").dt.replace_time_zone("UTC"),
        size_class=_size_class(pl.col("gpus")),
        low_data=pl.col("observed_share") < 0.5,
    )


def _hosts(rng: np.random.Generator, jobs: pl.DataFrame) -> pl.DataFrame:
    """One row per job x GPU: host and GPU index (8 GPUs per host)."""
    gpus = jobs["gpus"].to_numpy()
    hosts_per = jobs["n_hosts"].to_numpy()
    idx = np.repeat(np.arange(jobs.height), gpus)
    k = np.arange(idx.size) - np.repeat(np.cumsum(gpus) - gpus, gpus)  # 0..gpus-1
    per_host = np.ceil(gpus / hosts_per).astype(np.int64)[idx]
    first_host = rng.integers(0, 4096, jobs.height)[idx]
    host_no = first_host + k // per_host
    gpu_no = (k % per_host) % 8
    return pl.DataFrame(
        {
            "row": idx,
            "k": k,
            "host": [f"node-{h:04d}" for h in host_no],
            "gpu": gpu_no.astype(np.int16),
        }
    )


def _job_gpu_usage(rng: np.random.Generator, jobs: pl.DataFrame) -> pl.DataFrame:
    hosts = _hosts(rng, jobs)
    j = jobs.with_row_index("row").with_columns(pl.col("row").cast(pl.Int64))
    df = hosts.with_columns(pl.col("row").cast(pl.Int64)).join(j, on="row", how="left")
    alloc = pl.col("duration_s")
    never = pl.col("k") < pl.col("never_used_gpus")
    live = (pl.col("gpus") - pl.col("never_used_gpus")).clip(lower_bound=1)
    idle = pl.when(never).then(0.0).otherwise(pl.col("idle_slot_gpu_s") / live)
    missing = alloc * (1 - pl.col("observed_share"))
    return df.select(
        "job_id",
        pl.lit(0, pl.Int16).alias("attempt"),
        "host",
        "gpu",
        "gpu_model",
        "start_ts",
        "end_ts",
        alloc.alias("alloc_s"),
        (alloc - missing).alias("observed_s"),
        missing.alias("missing_s"),
        pl.when(never)
        .then(0.0)
        .otherwise((alloc - missing - idle).clip(lower_bound=0))
        .alias("busy_s"),
        idle.alias("idle_slot_s"),
        # memory is read (below), no held-idle stretch planted: held idle measured, none
        pl.lit(0.0).alias("idle_held_s"),
        idle.alias("idle_empty_s"),
        pl.when(never).then(0).otherwise(pl.col("idle_slots")).alias("idle_slots"),
        never.alias("never_used"),
        pl.when(never).then(alloc).otherwise(0.0).alias("never_used_s"),
        pl.when(never).then(0.0).otherwise(pl.col("util_mean")).alias("util_mean"),
        pl.when(never).then(0.0).otherwise(pl.col("util_max")).alias("util_max"),
        (pl.col("mem_util_mean") * 409.6).alias("mem_used_mean_mib"),
        (pl.col("mem_util_max") * 409.6).alias("mem_used_max_mib"),
        pl.lit(40960.0).alias("mem_total_mib"),
        "n_phases",
        "n_stable_phases",
        # power: 60 W idle, up to 400 W at full utilization; idle and never-used time at 60 W
        (
            (alloc - missing) * (60 + 3.4 * pl.when(never).then(0.0).otherwise("util_mean")) / 3.6e6
        ).alias("energy_kwh"),
        ((idle + pl.when(never).then(alloc).otherwise(0.0)) * 60 / 3.6e6).alias("lost_energy_kwh"),
    )


def _samples(
    rng: np.random.Generator, jgu: pl.DataFrame, interval_s: int
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """gpu_samples, idle_slots and stable phases for the given job x GPU rows."""
    samples, slots, phases = [], [], []
    for r in jgu.iter_rows(named=True):
        t0, t1 = r["start_ts"], r["end_ts"]
        n = max(2, int((t1 - t0).total_seconds() // interval_s))
        ts = [t0 + timedelta(seconds=interval_s * i) for i in range(n)]
        if r["never_used"]:
            util = np.zeros(n)
            mem = np.zeros(n)
        else:
            util = np.clip(rng.normal(70, 12, n), 1, 100)
            levels = np.repeat(rng.choice([6000.0, 12000.0, 22000.0], 3), -(-n // 3))[:n]
            mem = levels + rng.normal(0, 50, n)
            # plant an idle slot in the middle and a slow start
            a, b = n // 3, n // 3 + max(3, n // 8)
            util[a:b], mem[a:b] = 0.0, 0.0
            util[: max(1, n // 12)] = 0.0
            if b - a > 1:
                slots.append((r, ts[a], ts[min(b, n - 1)]))
            for p0, p1 in ((0, a), (b, n - 1)):
                if p1 - p0 > 2:
                    level = float(np.max(mem[p0:p1]))
                    phases.append((r, ts[p0], ts[p1], float(np.median(mem[p0:p1])), level))
        samples.append(
            pl.DataFrame(
                {
                    "host": r["host"],
                    "gpu": r["gpu"],
                    "ts": ts,
                    "util": util,
                    "mem_used_mib": mem,
                    "mem_total_mib": r["mem_total_mib"],
                    "job_id": r["job_id"],
                    "util_source": "DCGM_FI_DEV_GPU_UTIL",
                    "source": "builder",
                }
            )
        )
    keys = ("job_id", "attempt", "host", "gpu")
    slot_df = pl.DataFrame(
        [
            {
                **{k: r[k] for k in keys},
                "start_ts": a,
                "end_ts": b,
                "duration_s": (b - a).total_seconds(),
            }
            for r, a, b in slots
        ],
        schema_overrides={"attempt": pl.Int16, "gpu": pl.Int16},
    )
    phase_df = pl.DataFrame(
        [
            {
                **{k: r[k] for k in keys},
                "start_ts": a,
                "end_ts": b,
                "duration_s": (b - a).total_seconds(),
                "mem_level_mib": lvl,
                "mem_max_mib": mx,
                "mem_total_mib": r["mem_total_mib"],
                "idle_mem_mib": r["mem_total_mib"] - mx,
                "stable": (b - a).total_seconds() > 60 and r["mem_total_mib"] - mx > 1024,
            }
            for r, a, b, lvl, mx in phases
        ],
        schema_overrides={"attempt": pl.Int16, "gpu": pl.Int16},
    )
    return pl.concat(samples), slot_df, phase_df


def _bulk_intervals(
    rng: np.random.Generator, jgu: pl.DataFrame
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Idle slots and stable phases for non-drill jobs: one of each per busy GPU at random."""
    live = jgu.filter(~pl.col("never_used") & (pl.col("idle_slot_s") > 60))
    n = live.height
    frac = rng.random(n) * 0.7
    off = pl.lit(pl.Series(frac) * live["alloc_s"])
    slot = live.select(
        "job_id", "attempt", "host", "gpu",
        (pl.col("start_ts") + pl.duration(seconds=off)).alias("start_ts"),
        (pl.col("start_ts") + pl.duration(seconds=off + pl.col("idle_slot_s"))).alias("end_ts"),
        pl.col("idle_slot_s").alias("duration_s"),
    )  # fmt: skip
    phase = jgu.filter(~pl.col("never_used")).select(
        "job_id", "attempt", "host", "gpu", "start_ts", "end_ts",
        pl.col("alloc_s").alias("duration_s"),
        pl.col("mem_used_mean_mib").alias("mem_level_mib"),
        pl.col("mem_used_max_mib").alias("mem_max_mib"),
        "mem_total_mib",
        (pl.col("mem_total_mib") - pl.col("mem_used_max_mib")).alias("idle_mem_mib"),
        ((pl.col("mem_total_mib") - pl.col("mem_used_max_mib")) > 1024).alias("stable"),
    )  # fmt: skip
    return slot, phase


def _with_all(jobs: pl.DataFrame) -> pl.DataFrame:
    """The jobs twice: once under their VC, once under ALL_VCS, for per-VC summaries."""
    return pl.concat([jobs, jobs.with_columns(vc=pl.lit(ALL_VCS))])


def _summaries(jobs: pl.DataFrame, start: datetime, days: float) -> dict[str, pl.DataFrame]:
    """Every summary over all the jobs (gpu_model ALL_MODELS), then over each model's jobs."""
    parts = [(ALL_MODELS, jobs)] + [
        (m, jobs.filter(pl.col("gpu_model") == m))
        for m in jobs["gpu_model"].unique(maintain_order=True).to_list()
    ]
    out: dict[str, list[pl.DataFrame]] = {}
    for model, subset in parts:
        for name, frame in _model_summaries(subset, start, days).items():
            out.setdefault(name, []).append(frame.with_columns(gpu_model=pl.lit(model)))
    return {name: pl.concat(frames) for name, frames in out.items()}


def _model_summaries(jobs: pl.DataFrame, start: datetime, days: float) -> dict[str, pl.DataFrame]:
    j = _with_all(jobs)
    kind = pl.when(pl.col("is_debug")).then(pl.lit("debugging")).otherwise(pl.lit("non-debugging"))
    sums = [
        pl.len().alias("jobs"),
        pl.col("gpu_s").sum(),
        pl.col("idle_slot_gpu_s").sum(),
        pl.col("never_used_gpu_s").sum(),
    ]
    by_kind = j.group_by("vc", kind.alias("kind")).agg(sums)
    total = j.group_by("vc").agg(sums).with_columns(kind=pl.lit("total"))
    vc_total = total.select("vc", pl.col("gpu_s").alias("vc_gpu_s"))
    waste = (
        pl.concat([by_kind, total.select(by_kind.columns)])
        .join(vc_total, on="vc")
        .with_columns(
            idle_slot_pct_own=100 * pl.col("idle_slot_gpu_s") / pl.col("gpu_s"),
            never_used_pct_own=100 * pl.col("never_used_gpu_s") / pl.col("gpu_s"),
            idle_slot_pct_all=100 * pl.col("idle_slot_gpu_s") / pl.col("vc_gpu_s"),
            never_used_pct_all=100 * pl.col("never_used_gpu_s") / pl.col("vc_gpu_s"),
        )
    )
    req = (
        pl.when(pl.col("gpus").is_in([1, 2, 4, 8, 16]))
        .then(pl.col("gpus").cast(pl.String))
        .otherwise(pl.lit("other"))
    )
    never_by_size = (
        j.group_by("vc", req.alias("gpus_requested"))
        .agg(pl.len().alias("jobs"), (pl.col("never_used_gpus") > 0).sum().alias("jobs_with_never_used"))
        .with_columns(share_pct=100 * pl.col("jobs_with_never_used") / pl.col("jobs"))
    )  # fmt: skip
    grid_rows = []
    for vc, g in vc_total.iter_rows():
        base = 40.0 + 5 * (sum(map(ord, vc)) % 5)
        for t in (60.0, 120.0, 240.0, 480.0, 960.0):
            for m in (1.0, 2.0, 4.0, 8.0):
                pct = base * (0.9 ** np.log2(t / 60)) * (0.8 ** np.log2(m))
                grid_rows.append((vc, t, m, g * pct / 100, g, pct))
    grid = pl.DataFrame(
        grid_rows, schema=["vc", "t_s", "m_gib", "stable_gpu_s", "gpu_s", "pct"], orient="row"
    )
    share = lambda e: 100 * e.cast(pl.Float64).mean()  # noqa: E731
    spatial = (
        j.group_by("vc")
        .agg(
            pl.len().alias("jobs"),
            pl.col("util_mean").mean().alias("mean_gpu_util"),
            pl.col("mem_util_mean").mean().alias("mean_gpu_mem_util"),
            pl.col("cpu_util_mean").mean().alias("mean_cpu_util"),
            share((pl.col("util_mean") < 50) & (pl.col("mem_util_mean") < 50)).alias("gpu_and_mem_lt_50"),
            share((pl.col("util_mean") <= 20) & (pl.col("mem_util_mean") <= 20)).alias("gpu_and_mem_le_20"),
            share((pl.col("util_mean") < 20) & (pl.col("cpu_util_mean") < 20)).alias("gpu_and_cpu_lt_20"),
            share(pl.col("fluctuating")).alias("fluctuating"),
        )
        .unpivot(index=["vc", "jobs"], variable_name="metric", value_name="value")
    )  # fmt: skip
    dbg = j.filter(pl.col("is_debug"))
    dbg_kind = (
        pl.when(pl.col("is_debug_declared")).then(pl.lit("declared")).otherwise(pl.lit("inferred"))
    )
    dagg = [
        pl.len().alias("jobs"),
        pl.col("gpu_s").sum(),
        share(pl.col("hit_time_limit")).alias("hit_time_limit_pct"),
        share(pl.col("idle_share") >= 0.8).alias("idle_ge_threshold_pct"),
        (pl.col("idle_slot_gpu_s") + pl.col("never_used_gpu_s")).sum().alias("idle_gpu_s"),
    ]
    debug = pl.concat(
        [
            dbg.group_by("vc", dbg_kind.alias("kind")).agg(dagg),
            dbg.group_by("vc").agg(dagg).with_columns(kind=pl.lit("any")).select(
                "vc", "kind", "jobs", "gpu_s", "hit_time_limit_pct", "idle_ge_threshold_pct", "idle_gpu_s"
            ),
        ]
    )  # fmt: skip
    fin = j.filter(pl.col("state") != "running")
    gm = pl.col("gpu_s") / 60
    by_size_status = fin.group_by("vc", pl.col("size_class").alias("size"), "state").agg(
        pl.len().alias("jobs"),
        gm.sum().alias("gpu_minutes"),
        ((pl.col("util_mean") * gm).sum() / gm.sum()).alias("util_mean"),
    )
    hist = (
        fin.with_columns(
            bucket=pl.col("util_mean").round(0).cast(pl.Int16),
            busy_min=(pl.col("gpu_s") - pl.col("idle_slot_gpu_s") - pl.col("never_used_gpu_s")) / 60,
            idle_min=(pl.col("idle_slot_gpu_s") + pl.col("never_used_gpu_s")) / 60,
        )
        .group_by("vc", pl.col("size_class").alias("size"), "state", "bucket")
        .agg(pl.col("busy_min").sum(), pl.col("idle_min").sum())
    )  # fmt: skip
    zero = hist.group_by("vc", "size", "state").agg(pl.col("idle_min").sum().alias("gpu_minutes"))
    hist = pl.concat(
        [
            hist.select("vc", "size", "state", "bucket", pl.col("busy_min").alias("gpu_minutes")),
            zero.with_columns(bucket=pl.lit(0, pl.Int16)).select("vc", "size", "state", "bucket", "gpu_minutes"),
        ]
    ).group_by("vc", "size", "state", "bucket").agg(pl.col("gpu_minutes").sum())  # fmt: skip
    # as util_minute_hist.sql: each row also summed over sizes ('all') and over states ('all')
    hist = pl.concat([hist, hist.with_columns(size=pl.lit("all"))])
    hist = pl.concat([hist, hist.with_columns(state=pl.lit("all"))])
    hist = hist.group_by("vc", "size", "state", "bucket").agg(pl.col("gpu_minutes").sum())
    spread = (
        j.filter(pl.col("gpus") == 16)
        .group_by("vc", pl.col("n_hosts").alias("servers"))
        .agg(
            pl.len().alias("jobs"),
            pl.col("util_mean").mean().alias("util_mean"),
            pl.col("util_mean").quantile(0.5).alias("util_p50"),
            pl.col("util_mean").quantile(0.9).alias("util_p90"),
            pl.col("util_mean").quantile(0.95).alias("util_p95"),
        )
    )
    status_tot = j.group_by("vc").agg(
        pl.len().alias("all_jobs"), pl.col("gpu_s").sum().alias("all_gpu_s")
    )
    by_status = (
        j.group_by("vc", "state")
        .agg(pl.len().alias("jobs"), pl.col("gpu_s").sum())
        .join(status_tot, on="vc")
        .with_columns(
            jobs_pct=100 * pl.col("jobs") / pl.col("all_jobs"),
            gpu_time_pct=100 * pl.col("gpu_s") / pl.col("all_gpu_s"),
        )
    )  # fmt: skip
    queue = j.group_by("vc", "size_class").agg(
        pl.len().alias("jobs"),
        pl.col("queue_delay_s").mean().alias("delay_mean_s"),
        pl.col("queue_delay_s").quantile(0.5).alias("delay_p50_s"),
        pl.col("queue_delay_s").quantile(0.9).alias("delay_p90_s"),
        pl.col("queue_delay_s").quantile(0.99).alias("delay_p99_s"),
    )
    hours = lambda e: (e / 3600).sum()  # noqa: E731
    daily = (
        j.with_columns(day=pl.col("start_ts").dt.date())
        .group_by("vc", "day")
        .agg(
            hours(pl.col("gpu_s")).alias("alloc_gpu_h"),
            hours(pl.col("gpu_s") * pl.col("observed_share") - pl.col("idle_slot_gpu_s") - pl.col("never_used_gpu_s")).alias("busy_gpu_h"),
            hours(pl.col("idle_slot_gpu_s")).alias("idle_slot_gpu_h"),
            hours(pl.col("never_used_gpu_s")).alias("never_used_gpu_h"),
            hours(pl.col("gpu_s") * (1 - pl.col("observed_share"))).alias("missing_gpu_h"),
            hours(pl.col("gpu_s") * pl.col("observed_share")).alias("observed_gpu_h"),
            hours(pl.col("gpu_s") * pl.col("observed_share") * pl.col("util_mean") / 100).alias("util_gpu_h"),
            hours(pl.col("gpu_s").filter(pl.col("is_debug"))).alias("debug_gpu_h"),
            hours(pl.col("gpu_s").filter(pl.col("state") == "unsuccessful")).alias("failed_gpu_h"),
            hours(pl.col("gpu_s").filter(pl.col("state") == "killed")).alias("killed_gpu_h"),
        )
    )  # fmt: skip
    return {
        "waste_by_vc": waste,
        "never_used_by_size": never_by_size,
        "stable_phase_grid": grid,
        "spatial_summary": spatial,
        "debug_jobs": debug,
        "util_by_size_status": by_size_status,
        "util_minute_hist": hist,
        "util_by_spread": spread,
        "jobs_by_status": by_status,
        "queueing_delay": queue,
        "waste_daily": daily,
    }


CAUSES = ("fair-share", "fragmentation", "capacity", "other")


def _queue(rng: np.random.Generator, jobs: pl.DataFrame) -> dict[str, pl.DataFrame]:
    """queue_causes (one start per job, its wait split by cause) and queue_idle_overlap (per
    waiting stretch, a few holders of idle GPUs: other users' mostly), from the jobs' delays."""
    n = jobs.height
    wait = jobs["queue_delay_s"].to_numpy()
    split = rng.dirichlet([0.6, 1.2, 1.0, 0.4], n) * wait[:, None]
    cause = np.array(CAUSES, dtype=object)[split.argmax(axis=1)]
    gpus = jobs["gpus"].cast(pl.Float64)
    causes = jobs.select(
        "job_id", pl.lit(0, pl.Int16).alias("attempt"), "user", "vc", "gpu_model", "size_class",
        gpus.alias("gpus"), pl.col("n_hosts").alias("hosts"),
        (gpus / pl.col("n_hosts")).alias("per_host"),
        pl.lit(64.0).alias("vc_quota"),
        pl.col("submit_ts").alias("wait_start"), pl.col("start_ts").alias("wait_end"),
        pl.col("queue_delay_s").alias("wait_s"),
    ).with_columns(
        fair_share_s=split[:, 0], fragmentation_s=split[:, 1], capacity_s=split[:, 2],
        other_s=split[:, 3], cause=cause, out_of_order=rng.random(n) < 0.35,
    )  # fmt: skip
    holders = rng.poisson(2.0, n)
    row = np.repeat(np.arange(n), holders)
    users = jobs["user"].to_numpy()
    holder_user = users[rng.integers(0, n, row.size)]
    vcs = jobs["vc"].to_numpy()
    holder_vc = vcs[rng.integers(0, n, row.size)]
    wait_r = wait[row]
    idle = wait_r * rng.gamma(1.5, 1.5, row.size)
    overlap = (
        causes[row]
        .select("job_id", "attempt", "user", "vc", "gpus", "wait_start", "wait_end", "wait_s")
        .with_columns(holder_user=holder_user, holder_vc=holder_vc, idle_gpu_s=idle)
        .with_columns(
            same_vc=pl.col("holder_vc") == pl.col("vc"),
            same_user=pl.col("holder_user") == pl.col("user"),
            blocked_gpu_s=pl.min_horizontal("idle_gpu_s", pl.col("gpus") * pl.col("wait_s")),
        )
        .unique(subset=["job_id", "attempt", "holder_user", "holder_vc"], keep="first")
    )
    return {"queue_causes": causes, "queue_idle_overlap": overlap}


def _failures(rng: np.random.Generator, jobs: pl.DataFrame) -> pl.DataFrame:
    """failure_attempts: the last attempt of every unsuccessful or killed job, and earlier
    attempts that were retried (about 1 job in 12), each with a reason of the shipped rules (a
    matched log line for those) or of the scheduler."""
    n = jobs.height
    retried = np.where(rng.random(n) < 0.08, 1 + rng.poisson(0.5, n), 0)
    last_failed = jobs["state"].is_in(["unsuccessful", "killed"]).to_numpy()
    count = retried + last_failed
    row = np.repeat(np.arange(n), count)
    attempt = np.arange(row.size) - np.repeat(np.cumsum(count) - count, count)
    rules = shipped_rules()
    scheduler = [("TIMEOUT", "IF"), ("NODE_FAIL", "IF"), ("CANCELLED by 1001", "U")]
    reasons = [r.reason for r in rules] + ["time limit", "node failure", "cancelled by user"]
    sources = [",".join(r.sources) for r in rules] + [s for _, s in scheduler]
    states = ["FAILED"] * len(rules) + [s for s, _ in scheduler]
    pick = rng.integers(0, len(reasons), row.size)
    from_log = pick < len(rules)
    runtime = jobs["duration_s"].to_numpy()[row] / (retried[row] + 1)
    picked = lambda values: np.array(values, dtype=object)[pick]  # noqa: E731
    return jobs[row].select(
        "job_id", "user", "vc", "gpu_model", "gpus",
        pl.col("start_ts"), pl.col("end_ts"),
    ).with_columns(
        attempt=pl.Series(attempt, dtype=pl.Int16),
        raw_state=picked(states),
        exit_code=np.where(from_log, 1, 0).astype(np.int32),
        runtime_s=runtime,
        gpu_s=runtime * jobs["gpus"].to_numpy()[row],
        reason=picked(reasons),
        sources=picked(sources),
        origin=np.where(from_log, "log", "scheduler"),
        line=pl.Series([f"RuntimeError: {r} (rank 0)" if log else None
                        for r, log in zip(picked(reasons), from_log, strict=True)], dtype=pl.String),
        log_path=pl.Series([f"slurm-{j}.out" if log else None
                            for j, log in zip(jobs["job_id"].to_numpy()[row], from_log, strict=True)],
                           dtype=pl.String),
        line_no=np.where(from_log, 100 + pick, 0),
    )  # fmt: skip


def rolled_up(sql: str, name: str, rows: pl.DataFrame, cluster: str) -> pl.DataFrame:
    """A summary of the analyses (`analyses/<sql>.sql`, run as `gpuwaste analyze` runs it) over
    synthetic rows of the table `name` it reads, with that table's columns (those the builder
    leaves out null, as the stored file has them)."""
    con = duckdb.connect()
    try:
        con.register(name, conform(rows.with_columns(cluster=pl.lit(cluster)), table(name)))
        set_variables(con, {"cluster": cluster, **ROLLUP_LABELS})
        return con.sql(load_sql(f"analyses/{sql}")).pl()
    finally:
        con.close()


def _energy_daily(jgu: pl.DataFrame, jobs: pl.DataFrame, cluster: str) -> pl.DataFrame:
    """energy_daily as `gpuwaste analyze` computes it (its SQL file over the staging view
    allocation_days of the synthetic GPU rows), with a PUE of 1.2 and no CO2 or price."""
    con = duckdb.connect()
    try:
        for name, rows in (("job_gpu_usage", jgu), ("job_usage", jobs)):
            con.register(name, rows.with_columns(cluster=pl.lit(cluster)))
        set_variables(con, {"cluster": cluster, **ROLLUP_LABELS, "energy_pue": 1.2,
                            "energy_co2_g_per_kwh": None, "energy_price_per_kwh": None})  # fmt: skip
        con.execute(f"create temp view allocation_days as {load_sql('staging/allocation_days')}")
        return con.sql(load_sql("analyses/energy_daily")).pl()
    finally:
        con.close()


def _bookkeeping(wh: Warehouse, cluster: str, end: datetime) -> None:
    state = pl.DataFrame(
        {
            "source": ["prometheus", "slurm"],
            "watermark": [end, end - timedelta(minutes=20)],
            "updated_at": [end + timedelta(minutes=5)] * 2,
            "detail": ['{"series": 128}', '{"jobs": "all"}'],
        }
    )
    wh.replace_file("ingest_state", cluster, "state", state)
    quarantine = pl.DataFrame(
        {
            "source": ["slurm", "slurm", "prometheus"],
            "batch": ["sacct-1", "sacct-1", "2026-10-02"],
            "location": ["sacct.txt:17", "sacct.txt:42", "DCGM_FI_DEV_GPU_UTIL{gpu=3}"],
            "reason": ["bad timestamp: 2026-13-01", "missing field: AllocTRES", "value out of range: 250"],
            "raw": ["17|...|2026-13-01", "42|...", "250"],
            "ingested_at": [end] * 3,
        }
    )  # fmt: skip
    wh.replace_file("quarantine", cluster, "records", quarantine)


def build_result_warehouse(
    data_dir: Path,
    *,
    n_jobs: int = 400,
    seed: int = 0,
    cluster: str = "demo",
    vcs: tuple[str, ...] = ("vision", "nlp", "speech"),
    start: datetime = START,
    days: float = 7.0,
    drill_jobs: int = 12,
    sample_interval_s: int = 60,
    models: tuple[str, ...] = MODELS,
    planted: str | None = None,
) -> Built:
    """Write a plausible result warehouse into `data_dir`; returns what was written.

    `planted`: a text (e.g. hostile markup) that becomes the user, the job name and the host of
    the first drill-down job (`Built.drill_jobs[0]`), for tests of how pages show names."""
    rng = np.random.default_rng(seed)
    end = start + timedelta(days=days)
    wh = Warehouse(data_dir)
    jobs = _jobs(rng, n_jobs, vcs, start, days, models)
    jgu = _job_gpu_usage(rng, jobs)
    # Drill-down jobs: short, multi-GPU, with one never-used GPU among them.
    drill = (
        jobs.filter((pl.col("gpus").is_between(2, 8)) & (pl.col("duration_s") < 12 * 3600))
        .head(drill_jobs)["job_id"]
        .to_list()
    )
    if planted is not None and drill:
        first = pl.col("job_id") == drill[0]
        jobs = jobs.with_columns(
            pl.when(first).then(pl.lit(planted)).otherwise(pl.col(c)).alias(c)
            for c in ("user", "name")
        )
        jgu = jgu.with_columns(host=pl.when(first).then(pl.lit(planted)).otherwise("host"))
    in_drill = pl.col("job_id").is_in(drill)
    samples, slots, phases = _samples(rng, jgu.filter(in_drill), sample_interval_s)
    bulk_slots, bulk_phases = _bulk_intervals(rng, jgu.filter(~in_drill))
    queue = _queue(rng, jobs)
    failed = _failures(rng, jobs)
    for name, df in {
        "job_usage": jobs,
        "job_gpu_usage": jgu,
        "idle_slots": pl.concat([slots, bulk_slots], how="diagonal_relaxed"),
        "stable_phases": pl.concat([phases, bulk_phases], how="diagonal_relaxed"),
        **_summaries(jobs, start, days),
        **queue,
        "queue_cause_summary": rolled_up(
            "queue_cause_summary", "queue_causes", queue["queue_causes"], cluster
        ),
        "failure_attempts": failed,
        "failure_reasons": rolled_up("failure_reasons", "failure_attempts", failed, cluster),
        "energy_daily": _energy_daily(jgu, jobs, cluster),
        "lost_by_user": rolled_up("lost_by_user", "job_usage", jobs, cluster),
        "waits_behind_idle": rolled_up(
            "waits_behind_idle", "queue_idle_overlap", queue["queue_idle_overlap"], cluster
        ),
    }.items():
        wh.replace_file(name, cluster, KEY, df)
    if samples.height:
        wh.replace_window(
            "gpu_samples", cluster, start, end + timedelta(days=1), samples, source="builder"
        )
    _bookkeeping(wh, cluster, end)
    refresh_catalog(data_dir, force=True)
    return Built(
        data_dir=data_dir,
        cluster=cluster,
        vcs=vcs,
        jobs=jobs.with_columns(cluster=pl.lit(cluster)),
        drill_jobs=tuple(drill),
        start=start,
        end=end,
    )


def build_demo_warehouse(data_dir: Path, timeout_s: float = 900) -> Path:
    """The real thing: `gpuwaste demo --no-serve --data-dir D` (bundled sample, ingest, analyze)."""
    import subprocess
    import sys

    gpuwaste = Path(sys.executable).with_name("gpuwaste")
    done = subprocess.run(
        [str(gpuwaste), "demo", "--no-serve", "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"gpuwaste demo failed ({done.returncode}): {done.stderr[-2000:]}")
    return data_dir


def day_range(built: Built) -> tuple[date, date]:
    return built.start.date(), (built.end - timedelta(microseconds=1)).date()
