"""MIG instances are devices of their own, end to end (issue 14): profiles and slice weights, the
real dcgm-exporter MIG output, bad MIG labels, the one-off ingest of a MIG scrape, planted truth
per slice, and a host's GPU time unchanged when its GPUs are split."""

from __future__ import annotations

import json
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from gpuwaste.analyses.per_job import run_batch
from gpuwaste.analyses.run import analyze
from gpuwaste.analyses.sqlfiles import define_macros, load_sql, set_variables
from gpuwaste.cli import app
from gpuwaste.config import PrometheusLabels, Settings, Thresholds
from gpuwaste.generate import GeneratorSpec, write_all
from gpuwaste.ingest.prometheus.openmetrics_parse import parse_text
from gpuwaste.ingest.prometheus.rows import gpu_rows
from gpuwaste.warehouse.catalog import connect
from gpuwaste.warehouse.mig import MODEL_PROFILES, parse_profile, profile_problem
from gpuwaste.warehouse.store import Warehouse
from tests.conftest import FIXTURES
from tests.support.mig_cluster import label_only_mig_cluster

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
MIG_SAMPLE = FIXTURES / "exporter_text" / "dcgm_exporter_docs_mig_a100.prom"


# --- profiles -------------------------------------------------------------------------------


def test_profile_weights_by_hand() -> None:
    assert parse_profile("1g.10gb").weight == pytest.approx(1 / 7)  # type: ignore[union-attr]
    assert parse_profile("3g.40gb").weight == pytest.approx(3 / 7)  # type: ignore[union-attr]
    assert parse_profile("7g.80gb").weight == 1.0  # type: ignore[union-attr]
    assert parse_profile("1g.10gb+me").base == "1g.10gb"  # type: ignore[union-attr]
    assert parse_profile("2g.12gb").weight == 0.5  # type: ignore[union-attr]  # A30: 4 slices
    assert parse_profile("1g.6gb").memory_mib == 6144  # type: ignore[union-attr]
    assert parse_profile("gpu") is None and parse_profile("0g.5gb") is None


def test_profile_problems() -> None:
    assert profile_problem(None, "NVIDIA A100-SXM4-80GB") == "a MIG instance without its profile"
    assert "not a MIG profile" in str(profile_problem("big", None))
    assert profile_problem("1g.5gb", "NVIDIA A100-SXM4-80GB") == (
        "MIG profile '1g.5gb' does not exist on NVIDIA A100-SXM4-80GB"
    )
    assert profile_problem("1g.5gb", "NVIDIA A100-SXM4-40GB") is None
    assert profile_problem("1g.5gb", None) is None  # model unknown: any well-formed profile


def _sql_weights(profiles: list[str | None]) -> list[float]:
    """gpu_weight as staging/alloc_intervals.sql and allocations.sql compute it, for one
    allocation per profile."""
    con = duckdb.connect()
    con.execute("set TimeZone = 'UTC'")
    n = len(profiles)
    con.register(
        "job_gpus",
        pl.DataFrame(
            {
                "cluster": ["c"] * n,
                "job_id": [f"j{i:03d}" for i in range(n)],
                "attempt": [0] * n,
                "host": ["h"] * n,
                "gpu": [0] * n,
                "gpu_instance": [None if p is None else i for i, p in enumerate(profiles)],
                "mig_profile": profiles,
                "gpu_model": [None] * n,
                "start_ts": [T0] * n,
                "end_ts": [T0 + timedelta(hours=1)] * n,
            },
            schema_overrides={"gpu_instance": pl.Int16, "mig_profile": pl.String},
        ),
    )
    con.register(
        "jobs", pl.DataFrame({"cluster": ["c"], "job_id": ["x"], "start_ts": [T0], "end_ts": [T0]})
    )
    con.register("analyze_batch", pl.DataFrame({"job_id": [f"j{i:03d}" for i in range(n)]}))
    set_variables(con, {"cluster": "c", "as_of": T0})
    con.execute(f"create temp table shared_spans as {load_sql('plan/shared_spans')}")
    define_macros(con)
    con.execute(f"create temp table alloc_intervals as {load_sql('staging/alloc_intervals')}")
    rows = con.sql(f"select job_id, gpu_weight from ({load_sql('staging/allocations')})").pl()
    return rows.sort("job_id")["gpu_weight"].to_list()


def test_sql_weight_rule_equals_python() -> None:
    """allocations.sql and warehouse/mig.py state one rule: every known profile, suffixes, A30's
    4-slice profiles, a whole GPU (no profile) and text that is no profile (weight 1)."""
    names = sorted({p for ps in MODEL_PROFILES.values() for p in ps})
    names += ["1g.10gb+me", "1g.5gb-me", "4g.24gb", "7g.141gb"]
    weights = _sql_weights([*names, None, "whole"])
    want = [parse_profile(n).weight for n in names] + [1.0, 1.0]  # type: ignore[union-attr]
    assert weights == pytest.approx(want, abs=1e-12)


def test_the_sql_weighs_a_profile_by_the_one_macro() -> None:
    """Every SQL file that weighs a MIG profile calls mig_slice_weight (warehouse/mig.py's
    SLICE_WEIGHT_MACRO), none restates the rule (its four-slice profiles, its pattern)."""
    sql = Path(__file__).resolve().parent.parent / "gpuwaste" / "sql"
    callers = set()
    for path in sorted(sql.glob("*/*.sql")):
        lines = path.read_text().splitlines()
        code = "\n".join(line for line in lines if not line.lstrip().startswith("--"))
        assert "'1g.6gb'" not in code and r"'^(\d+)g\.'" not in code, path
        if "mig_slice_weight(" in code:
            callers.add(path.stem)
    assert callers == {"alloc_intervals", "resolve_unknown_gpus", "queue_wait_pieces"}


# --- ingest: one device per instance --------------------------------------------------------


def _rows(text: str) -> tuple[pl.DataFrame, list[str]]:
    parsed = parse_text(text, default_ts=T0)
    out = gpu_rows(parsed.series, PrometheusLabels(), source="test")
    return out.frame, [r.reason for r in out.refused]


def test_real_dcgm_exporter_mig_output() -> None:
    """NVIDIA's documented MIG output: the parent GPU and GPU instance 13 (1g.5gb) are two
    devices; the instance's utilization is its GR_ENGINE_ACTIVE."""
    frame, refused = _rows(MIG_SAMPLE.read_text())
    assert refused == []
    rows = frame.sort("gpu_instance", nulls_last=False).to_dicts()
    assert [(r["gpu"], r["gpu_instance"], r["mig_profile"]) for r in rows] == [
        (0, None, None),
        (0, 13, "1g.5gb"),
    ]
    parent, instance = rows
    assert parent["util"] == pytest.approx(99.563) and parent["mem_used_mib"] == 4845
    assert instance["util"] == pytest.approx(99.5687)
    assert instance["util_source"] == "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
    assert instance["mem_total_mib"] is None  # the instance exports no FB_* here


LABELS = 'gpu="0",UUID="GPU-1",modelName="NVIDIA A100-SXM4-80GB",Hostname="n1"'


def test_gpu_util_is_never_the_utilization_of_an_instance() -> None:
    """dcgm-exporter#216: GPU_UTIL reads 0 on MIG. An instance with only GPU_UTIL has no
    utilization; with SM_ACTIVE and GR_ENGINE_ACTIVE, SM_ACTIVE wins; a whole GPU keeps
    GPU_UTIL when it is all there is."""
    mig = f'{LABELS},GPU_I_ID="1",GPU_I_PROFILE="1g.10gb"'
    mig2 = f'{LABELS},GPU_I_ID="2",GPU_I_PROFILE="3g.40gb"'
    text = "\n".join(
        [
            f"DCGM_FI_DEV_GPU_UTIL{{{mig}}} 0",
            f"DCGM_FI_DEV_FB_USED{{{mig}}} 100",
            f"DCGM_FI_DEV_FB_FREE{{{mig}}} 9900",
            f"DCGM_FI_DEV_GPU_UTIL{{{mig2}}} 0",
            f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{mig2}}} 0.5",
            f"DCGM_FI_PROF_SM_ACTIVE{{{mig2}}} 0.25",
            'DCGM_FI_DEV_GPU_UTIL{gpu="1",Hostname="n1"} 40',
        ]
    )
    frame, refused = _rows(text + "\n")
    assert refused == []
    got = {(r["gpu"], r["gpu_instance"]): r for r in frame.to_dicts()}
    assert got[(0, 1)]["util"] is None and got[(0, 1)]["util_source"] is None
    assert got[(0, 1)]["mem_total_mib"] == 10000  # per instance: its used + free
    assert got[(0, 2)]["util"] == 25.0 and got[(0, 2)]["util_source"] == "DCGM_FI_PROF_SM_ACTIVE"
    assert (
        got[(1, None)]["util"] == 40.0 and got[(1, None)]["util_source"] == "DCGM_FI_DEV_GPU_UTIL"
    )


@pytest.mark.parametrize(
    ("labels", "reason"),
    [
        ('GPU_I_ID="3"', "a MIG instance without its profile (GPU_I_PROFILE)"),
        ('GPU_I_ID="3",GPU_I_PROFILE="1g.5gb"', "does not exist on NVIDIA A100-SXM4-80GB"),
        ('GPU_I_ID="3",GPU_I_PROFILE="half"', "'half' is not a MIG profile"),
        ('GPU_I_PROFILE="1g.10gb"', "a MIG profile without its instance id (GPU_I_ID)"),
        ('GPU_I_ID="x",GPU_I_PROFILE="1g.10gb"', "MIG instance id 'x' is not a number"),
    ],
)
def test_bad_mig_labels_are_refused_never_merged_into_the_parent(labels: str, reason: str) -> None:
    parent = f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{LABELS}}} 0.5"
    bad = f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{LABELS},{labels}}} 0.0"
    frame, refused = _rows(f"{parent}\n{bad}\n")
    assert len(refused) == 1 and reason in refused[0], refused
    assert frame.height == 1 and frame["util"].to_list() == [50.0]  # the parent alone
    assert frame["gpu_instance"].to_list() == [None]


# --- the generator's MIG hosts, through the command line ------------------------------------

SPEC = GeneratorSpec(
    seed=4, gpus=8, days=0.25, interval_s=15, cluster="m", mig_hosts=2, shared_gpus=1
)


@pytest.fixture(scope="module")
def mig_cluster(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, object]]:
    out = tmp_path_factory.mktemp("mig-generated")
    write_all(SPEC, out)
    truth = json.loads((out / "truth.json").read_text())
    data = out / "wh"
    for argv in (
        ["ingest", "openmetrics", "--file", str(out / "metrics.om"), "--cluster", "m"],
        ["ingest", "slurm", "--file", str(out / "sacct.txt"), "--cluster", "m"],
        ["analyze"],
    ):
        res = CliRunner().invoke(app, [*argv, "--data-dir", str(data)])
        assert res.exit_code == 0, (argv, res.output)
    return data, truth


def test_the_dashboards_per_job_totals_over_a_period_weigh_slices_as_waste_daily(
    mig_cluster: tuple[Path, dict[str, object]],
) -> None:
    """With a period, the Overview's own sum of the jobs' GPU rows (a user, size or state filter:
    queries.job_gpu_hours) counts each allocation's share of its wall time in the period, so
    a MIG slice or a shared GPU keeps its weight: over the cluster's days it equals
    waste_daily, and the whole period equals no period at all."""
    from gpuwaste.dashboard import queries as q
    from gpuwaste.dashboard.filters import Filters
    from gpuwaste.warehouse.readonly import read_only_connection

    data, _ = mig_cluster
    con = read_only_connection(data)
    try:
        lo, hi = con.sql("select min(day), max(day) from waste_daily").fetchall()[0]
        period = Filters(cluster="m", start=lo, end=hi)
        jobs = q.job_gpu_hours(con, period).row(0, named=True)
        daily = q.gpu_hours(con, period).row(0, named=True)
        everything = q.job_gpu_hours(con, Filters(cluster="m")).row(0, named=True)
    finally:
        con.close()
    weighted = Warehouse(data).read("job_gpu_usage", "m")["alloc_s"].sum() / 3600
    assert jobs["alloc_gpu_h"] == pytest.approx(weighted, rel=1e-6)
    for column in set(jobs) & set(daily):
        assert jobs[column] == pytest.approx(daily[column], rel=1e-6, abs=1e-6), column
    for column, value in everything.items():
        assert jobs[column] == pytest.approx(value, rel=1e-6, abs=1e-6), column


def test_default_generator_output_has_no_mig(tmp_path: Path) -> None:
    write_all(GeneratorSpec(seed=4, gpus=8, days=0.05), tmp_path)
    assert "GPU_I_ID" not in (tmp_path / "metrics.om").read_text()
    assert "mig" not in json.loads((tmp_path / "truth.json").read_text())


def test_one_off_ingest_of_a_mig_scrape_gives_one_device_per_instance(
    mig_cluster: tuple[Path, dict[str, object]],
) -> None:
    data, truth = mig_cluster
    layout = truth["mig"]["devices"]  # type: ignore[index]
    devices = Warehouse(data).read("gpu_samples", "m").filter(pl.col("host").str.starts_with("mig"))
    got = devices.select("host", "gpu", "gpu_instance", "mig_profile").unique()
    want = pl.DataFrame(layout, schema=got.schema).filter(pl.col("host").str.starts_with("mig"))
    parents = want.filter(pl.col("gpu_instance").is_not_null()).select("host", "gpu").unique()
    want = pl.concat(
        [want, parents.with_columns(gpu_instance=None, mig_profile=None).select(want.columns)],
        how="vertical_relaxed",
    )
    assert got.sort(pl.all()).equals(want.unique().sort(pl.all()))
    assert set(devices["gpu_model"].unique()) == {"NVIDIA A100-SXM4-80GB"}
    # an instance's utilization never comes from GPU_UTIL (written as 0 on every instance)
    inst = devices.filter(pl.col("gpu_instance").is_not_null())
    assert set(inst["util_source"].unique()) == {"DCGM_FI_PROF_GR_ENGINE_ACTIVE"}


def test_planted_truth_per_slice(mig_cluster: tuple[Path, dict[str, object]]) -> None:
    """Every MIG-host job, whole GPU or slice: its device, its GPU time weighted by the slice,
    its idle-slot time, never-used flag and utilization, as planted (exact: jobs and slots are
    on sample boundaries)."""
    data, truth = mig_cluster
    want = pl.DataFrame(truth["mig"]["jobs"])  # type: ignore[index]
    usage = Warehouse(data).read("job_gpu_usage", "m")
    got = want.join(usage, on="job_id", how="left", suffix="_got")
    assert got.height == want.height > 20
    shared = got.filter(pl.col("shared"))
    assert shared.height >= 4 and (shared["gpu_weight"] < 1).any()  # overlapping sharers
    assert got.filter(pl.col("gpu_instance").is_not_null())["mig_profile"].n_unique() >= 4
    for r in got.to_dicts():
        where = r["job_id"]
        assert (r["host_got"], r["gpu_got"], r["gpu_instance_got"]) == (
            r["host"], r["gpu"], r["gpu_instance"],
        ), where  # fmt: skip
        assert r["mig_profile_got"] == r["mig_profile"], where
        assert r["gpu_weight_got"] == pytest.approx(r["gpu_weight"]), where
        assert r["alloc_s_got"] == pytest.approx(r["gpu_s"]), where
        assert r["idle_slot_s_got"] == pytest.approx(r["idle_slot_s"] * r["gpu_weight"]), where
        assert r["never_used_got"] == r["never_used"], where
        if r["util_mean"] is not None:  # (none planted on a shared GPU)
            assert r["util_mean_got"] == pytest.approx(r["util_mean"]), where
        if r["energy_kwh"] is not None:  # the parent's power x the slice (none on a shared GPU)
            assert r["energy_kwh_got"] == pytest.approx(r["energy_kwh"], rel=0.01), where
        assert r["mem_total_mib_got"] == r["mem_total_mib"], where
    jobs = Warehouse(data).read("job_usage", "m").join(want.select("job_id", "gpu_s"), on="job_id")
    assert jobs["gpu_s"].to_list() == pytest.approx(jobs["gpu_s_right"].to_list())


# --- property: splitting a host's GPUs does not change its GPU time -------------------------

A100_80 = {"1g.10gb": 1, "2g.20gb": 2, "3g.40gb": 3, "4g.40gb": 4, "7g.80gb": 7}


@st.composite
def layouts(draw: st.DrawFn) -> list[list[str | None]]:
    """Per GPU of a host: [None] (whole), or MIG profiles that use all 7 compute slices."""
    out: list[list[str | None]] = []
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            out.append([None])
            continue
        left, parts = 7, []
        while left:
            p = draw(st.sampled_from([n for n, k in A100_80.items() if k <= left]))
            parts.append(p)
            left -= A100_80[p]
        out.append(parts)
    return out


def _host_gpu_time(data_dir: Path, layout: list[list[str | None]], utils: list[float]) -> dict:
    """Analyze one job per device, all over the same hour, and return the GPU-time and energy
    totals. Each GPU draws its own power (`_parent_power`), which the exporter repeats on every
    instance of it."""
    wh = Warehouse(data_dir)
    end = T0 + timedelta(hours=1)
    samples, job_gpus, jobs = [], [], []
    for gpu, parts in enumerate(layout):
        for inst, profile in enumerate(parts):
            instance = None if profile is None else inst + 1
            job = f"j{gpu}-{inst}"
            u = utils[(gpu + inst) % len(utils)]
            for k in range(0, 3600, 60):
                samples.append((gpu, instance, profile, T0 + timedelta(seconds=k), u))
            job_gpus.append((job, gpu, instance, profile))
            jobs.append(job)
    wh.replace_window(
        "gpu_samples",
        "c",
        T0,
        end,
        pl.DataFrame(
            [
                {
                    "host": "h",
                    "gpu": g,
                    "gpu_instance": i,
                    "mig_profile": p,
                    "ts": t,
                    "util": u,
                    "mem_used_mib": 0.0 if u == 0 else 1000.0,
                    "mem_total_mib": 10240.0,
                    "power_w": _parent_power(g),
                }
                for g, i, p, t, u in samples
            ],
            infer_schema_length=None,
        ),
    )
    wh.upsert(
        "jobs",
        "c",
        "t",
        pl.DataFrame(
            {
                "job_id": jobs,
                "state": ["passed"] * len(jobs),
                "start_ts": [T0] * len(jobs),
                "end_ts": [end] * len(jobs),
                "gpus": [1] * len(jobs),
                "vc": ["v"] * len(jobs),
            }
        ),
    )
    wh.upsert(
        "job_gpus",
        "c",
        "t",
        pl.DataFrame(
            [
                {
                    "job_id": j,
                    "attempt": 0,
                    "host": "h",
                    "gpu": g,
                    "gpu_instance": i,
                    "mig_profile": p,
                    "start_ts": T0,
                    "end_ts": end,
                }
                for j, g, i, p in job_gpus
            ],
            infer_schema_length=None,
        ),
    )
    analyze(Settings(data_dir=data_dir), quiet=True)
    usage = wh.read("job_gpu_usage", "c")
    for r in usage.iter_rows(named=True):  # the figures add up on every device
        total = r["idle_slot_s"] + r["never_used_s"] + r["busy_s"] + r["missing_s"]
        assert total == pytest.approx(r["alloc_s"]), r
    daily = wh.read("waste_daily", "c").filter(
        (pl.col("vc") == "(all)") & (pl.col("gpu_model") == "(all)")
    )
    return {
        "job_gpu_usage": usage["alloc_s"].sum(),
        "job_usage": wh.read("job_usage", "c")["gpu_s"].sum(),
        "waste_daily": daily["alloc_gpu_h"].sum() * 3600,
        "devices": usage.height,
        "energy_kwh": usage["energy_kwh"].sum(),
        "job_energy_kwh": wh.read("job_usage", "c")["energy_kwh"].sum(),
    }


def _parent_power(gpu: int) -> float:
    """The power (W) GPU `gpu` of the host draws, whole or split: a different one per GPU, so
    that an instance weighed by another GPU's power would show."""
    return 100.0 + 55.0 * gpu


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layout=layouts(), utils=st.lists(st.sampled_from([0.0, 30.0, 90.0]), min_size=1))
def test_a_hosts_gpu_time_is_unchanged_when_its_gpus_are_split(
    layout: list[list[str | None]], utils: list[float]
) -> None:
    whole: list[list[str | None]] = [[None] for _ in layout]
    with tempfile.TemporaryDirectory() as one, tempfile.TemporaryDirectory() as two:
        split_time = _host_gpu_time(Path(one), layout, utils)
        whole_time = _host_gpu_time(Path(two), whole, utils)
    assert split_time["devices"] == sum(len(p) for p in layout)
    hour_per_gpu = 3600.0 * len(layout)
    for name in ("job_gpu_usage", "job_usage", "waste_daily"):
        assert split_time[name] == pytest.approx(hour_per_gpu), name
        assert whole_time[name] == pytest.approx(hour_per_gpu), name
    # energy: each GPU's power for the hour, counted once however it is split (each device's
    # kWh stored to 6 decimals: at most 7 roundings of 5e-7 per GPU)
    kwh = sum(_parent_power(g) for g in range(len(layout))) * 3600 / 3.6e6
    for name in ("energy_kwh", "job_energy_kwh"):
        assert whole_time[name] == pytest.approx(kwh, abs=1e-5), name
        assert split_time[name] == pytest.approx(whole_time[name], abs=7 * len(layout) * 5e-7), name


# --- allocations to instances ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("tres", "gres_style", "want"),
    [
        ("billing=4,cpu=4,gres/gpu:1g.10gb=1,gres/gpu=1,mem=30G,node=1", False, ("1g.10gb", None)),
        ("cpu=2,gres/gpu:a100_1g.5gb=1,node=1", False, ("1g.5gb", "a100")),
        ("gpu:nvidia_a100-sxm4-80gb_3g.40gb:1", True, ("3g.40gb", "nvidia_a100-sxm4-80gb")),
        ("gpu:1g.10gb:2", True, ("1g.10gb", None)),
        ("cpu=8,gres/gpu:a100=2,gres/gpu=2", False, (None, "a100")),
        ("cpu=8,gres/gpu=2", False, (None, None)),
        ("gres/gpu:1g.10gb=1,gres/gpu:2g.20gb=1,gres/gpu=2", False, (None, None)),
    ],
)
def test_slurm_gres_type_names_the_mig_profile_or_the_model(
    tres: str, gres_style: bool, want: tuple[str | None, str | None]
) -> None:
    from gpuwaste.ingest.slurm.parse import gpu_count, gpu_type

    assert gpu_type(tres, gres_style) == want
    assert gpu_count("gpu:1g.10gb:2", gres_style=True) == 2


def test_sacct_with_mig_gres_and_scontrol_indices() -> None:
    """A MIG job keeps its profile, and takes no index from scontrol (Slurm's MIG device index
    names neither the parent GPU nor the instance): it stays unknown (-1) with its profile until
    the instances' job labels name them; a whole-GPU job takes scontrol's index."""
    from gpuwaste.ingest.gpu_indices import build_job_gpus
    from gpuwaste.ingest.slurm.parse import parse_sacct

    text = (
        "JobID|JobIDRaw|JobName|User|Account|Partition|QOS|State|ExitCode|Submit|Start|End|"
        "Elapsed|Timelimit|AllocTRES|NodeList\n"
        "11|11|a|u|acct|mig|normal|COMPLETED|0:0|2026-11-01T10:00:00|2026-11-01T10:01:00|"
        "2026-11-01T11:01:00|01:00:00|1-00:00:00|cpu=4,gres/gpu:a100_1g.5gb=1,gres/gpu=1|n1\n"
        "12|12|b|u|acct|gpu|normal|COMPLETED|0:0|2026-11-01T10:00:00|2026-11-01T10:01:00|"
        "2026-11-01T11:01:00|01:00:00|1-00:00:00|cpu=4,gres/gpu:a100=1,gres/gpu=1|n1\n"
    )
    jobs = parse_sacct(text).jobs
    assert jobs.select("job_id", "mig_profile", "gpu_model", "gpus").rows() == [
        ("11", "1g.5gb", "a100", 1),
        ("12", None, "a100", 1),
    ]
    scontrol = pl.DataFrame(
        {"job_id": ["11", "12"], "host": ["n1", "n1"], "gpu": [0, 1], "gpu_from": "scontrol"}
    )
    empty = pl.DataFrame(
        schema={
            "job_id": pl.String,
            "host": pl.String,
            "gpu": pl.Int16,
            "gpu_instance": pl.Int16,
            "mig_profile": pl.String,
            "gpu_model": pl.String,
        }
    )
    rows = build_job_gpus(jobs, [scontrol, empty.with_columns(gpu_from=pl.lit("telemetry-label"))])
    assert rows.select("job_id", "gpu", "gpu_instance", "mig_profile", "gpu_model").rows() == [
        ("11", -1, None, "1g.5gb", "a100"),
        ("12", 1, None, None, "a100"),
    ]
    labelled = empty.vstack(
        pl.DataFrame(
            [("11", "n1", 0, 9, "1g.5gb", "NVIDIA A100-SXM4-40GB")],
            schema=empty.schema,
            orient="row",
        )
    )
    rows = build_job_gpus(
        jobs, [scontrol, labelled.with_columns(gpu_from=pl.lit("telemetry-label"))]
    )
    assert rows.filter(pl.col("job_id") == "11").select("gpu", "gpu_instance").rows() == [(0, 9)]


def test_kube_state_metrics_mig_requests_make_gpu_jobs() -> None:
    """`nvidia.com/mig-1g.10gb` requests (kube-state-metrics writes the resource as
    `nvidia_com_mig_1g_10gb`) make a pod a GPU job, one device per instance requested. The
    scrape is the real Kubernetes 1.35 capture with one pod's cpu request line turned into a
    MIG request (the captured cluster has no GPUs)."""
    from gpuwaste.config import KubernetesJobs
    from gpuwaste.ingest.prometheus.kube import pods_to_jobs

    ksm = FIXTURES / "kube_state_metrics" / "nri_kubernetes_k8s_1_35_pod_families.prom"
    real = 'container="compute-pi-digits",node="datagen-1-35",resource="cpu",unit="core"} 0.04'
    text = ksm.read_text()
    assert real in text
    mig = 'container="compute-pi-digits",node="datagen-1-35",resource="nvidia_com_mig_1g_10gb",'
    text = text.replace(real, mig + 'unit="integer"} 2', 1)
    parsed = parse_text(text, default_ts=T0)
    jobs = pods_to_jobs(
        parsed.series,
        KubernetesJobs(enabled=True),
        newest=T0,
        running_slack=timedelta(seconds=45),
    )
    assert jobs.select("job_id", "gpus").rows() == [("scraper/e2e-statefulset-0", 2)]


def test_jobs_from_instance_labels_alone(tmp_path: Path) -> None:
    """No scheduler: the hpc_job labels of instance series give one allocation per instance,
    with its profile, and the analysis weighs it by its slice."""
    data, truth = label_only_mig_cluster(tmp_path)
    wh = Warehouse(data)
    spans = wh.read("job_gpus", "m").join(pl.DataFrame(truth), on="job_id", suffix="_truth")
    assert spans.height == len(truth) > 5
    assert spans.filter(
        (pl.col("gpu_instance").eq_missing(pl.col("gpu_instance_truth")).not_())
        | (pl.col("mig_profile").eq_missing(pl.col("mig_profile_truth")).not_())
    ).is_empty()
    usage = wh.read("job_gpu_usage", "m").join(pl.DataFrame(truth), on="job_id", suffix="_t")
    # label-derived spans end one scrape interval after the last labelled sample, as the truth
    assert usage["alloc_s"].to_list() == pytest.approx(usage["gpu_s"].to_list())


# --- GPU models -----------------------------------------------------------------------------


def _model_cluster(data_dir: Path) -> None:
    """Three one-GPU jobs over one hour, sampled every minute: on host a1 the samples name the
    model (DCGM modelName), h1's model comes from the config's host map, x1's from the Slurm GRES
    type. a1 idles 10 minutes (an idle slot) and runs at 10 % with 8000 MiB: it would fit A100
    80GB's 1g.10gb; h1 runs at 10 % with 20000 MiB (too much memory for the smallest slice)."""
    from gpuwaste.config import ClusterConfig

    end = T0 + timedelta(hours=1)
    rows = []
    for host, model, mem in (
        ("a1", "NVIDIA A100-SXM4-80GB", 8000.0),
        ("h1", None, 20000.0),
        ("x1", None, 8000.0),
    ):
        for k in range(60):
            idle = host == "a1" and 20 <= k < 30
            rows.append(
                {
                    "host": host,
                    "gpu": 0,
                    "gpu_model": model,
                    "ts": T0 + timedelta(minutes=k),
                    "util": 0.0 if idle else 10.0,
                    "mem_used_mib": 0.0 if idle else mem,
                    "mem_total_mib": 81920.0,
                }
            )
    wh = Warehouse(data_dir)
    wh.replace_window("gpu_samples", "c", T0, end, pl.DataFrame(rows))
    hosts = ["a1", "h1", "x1"]
    wh.upsert(
        "jobs",
        "c",
        "t",
        pl.DataFrame(
            {
                "job_id": [f"job-{h}" for h in hosts],
                "user": ["u"] * 3,
                "vc": ["v"] * 3,
                "state": ["passed"] * 3,
                "start_ts": [T0] * 3,
                "end_ts": [end] * 3,
                "gpus": [1] * 3,
            }
        ),
    )
    wh.upsert(
        "job_gpus",
        "c",
        "t",
        pl.DataFrame(
            {
                "job_id": [f"job-{h}" for h in hosts],
                "attempt": [0] * 3,
                "host": hosts,
                "gpu": [0] * 3,
                "gpu_model": [None, None, "a100"],
                "start_ts": [T0] * 3,
                "end_ts": [end] * 3,
            }
        ),
    )
    config = ClusterConfig(name="c", gpu_models={"h*": "NVIDIA H100 80GB HBM3", "a*": "wrong"})
    analyze(Settings(data_dir=data_dir, clusters=[config]), quiet=True)


def test_gpu_model_per_device_report_by_model_and_fits_smaller_slice(tmp_path: Path) -> None:
    _model_cluster(tmp_path)
    wh = Warehouse(tmp_path)
    models = dict(wh.read("job_gpu_usage", "c").select("host", "gpu_model").iter_rows())
    # DCGM modelName first (the host map's "a*" does not override it), then the map, then GRES
    assert models == {"a1": "NVIDIA A100-SXM4-80GB", "h1": "NVIDIA H100 80GB HBM3", "x1": "a100"}
    diagnoses = dict(wh.read("job_usage", "c").select("job_id", "diagnoses").iter_rows())
    assert "fits_smaller_slice" in diagnoses["job-a1"].split(",")
    assert "fits_smaller_slice" not in diagnoses["job-h1"]  # 20000 MiB > H100's 1g.10gb
    assert "fits_smaller_slice" not in diagnoses["job-x1"]  # "a100": no known MIG profiles
    res = CliRunner().invoke(
        app, ["report", "--by", "model", "--data-dir", str(tmp_path), "--format", "json"]
    )
    assert res.exit_code == 0, res.output
    rows = {r["model"]: r for r in json.loads(res.stdout)}
    assert set(rows) == {"NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3", "a100"}
    a100 = rows["NVIDIA A100-SXM4-80GB"]
    assert a100["gpu_h"] == pytest.approx(1.0) and a100["jobs"] == 1
    assert a100["idle_slot_gpu_h"] == pytest.approx(10 / 60)  # samples 20..29: 10 minutes
    assert a100["lost_gpu_h"] == pytest.approx(10 / 60) and rows["a100"]["lost_gpu_h"] == 0
    summary = wh.read("waste_by_model", "c").filter(
        (pl.col("vc") == "(all)") & (pl.col("gpu_model") != "(all)")
    )
    assert dict(summary.select("gpu_model", "lost_gpu_h").iter_rows()) == pytest.approx(
        {m: r["lost_gpu_h"] for m, r in rows.items()},
        rel=1e-5,  # the report prints rounded
    )


# --- money ----------------------------------------------------------------------------------


def _priced_cluster(
    data_dir: Path, prices: dict[str, float], parent: bool = False, settled: bool = False
) -> None:
    """Host a1 (A100 80GB): GPU 0 in MIG mode, its instance 1 (1g.10gb) runs job `slice` for an
    hour with a 10-minute idle slot; GPU 1, whole, runs job `whole` for an hour, busy. With
    `settled`, the telemetry goes on an hour past the jobs (one sample of an idle GPU of host
    a2), so the exporter's counters count them (docs/exporter.md#counters-and-windows)."""
    from gpuwaste.config import CostSettings

    end = T0 + timedelta(hours=1)
    rows = []
    devices = [(0, 1, "1g.10gb"), (1, None, None)] + ([(0, None, None)] if parent else [])
    for gpu, inst, profile in devices:
        for k in range(60):
            idle = inst is not None and 20 <= k < 30
            rows.append(
                {
                    "host": "a1",
                    "gpu": gpu,
                    "gpu_instance": inst,
                    "mig_profile": profile,
                    "gpu_model": "NVIDIA A100-SXM4-80GB",
                    "ts": T0 + timedelta(minutes=k),
                    "util": 99.0 if (gpu, inst) == (0, None) else 0.0 if idle else 60.0,
                    "mem_used_mib": 0.0 if idle else 5000.0,
                    "mem_total_mib": 10240.0 if inst is not None else 81920.0,
                    "job_id": "slice" if inst is not None else "whole" if gpu == 1 else None,
                }
            )
    if settled:
        later = {**rows[-1], "host": "a2", "gpu": 0, "ts": end + timedelta(hours=1), "util": 0.0}
        rows.append({**later, "job_id": None, "mem_used_mib": 0.0})
    wh = Warehouse(data_dir)
    last = max(r["ts"] for r in rows) + timedelta(minutes=1)
    wh.replace_window("gpu_samples", "c", T0, max(end, last), pl.DataFrame(rows))
    jobs = {
        "job_id": ["slice", "whole"],
        "user": ["ann", "bob"],
        "vc": ["v", "v"],
        "state": ["passed"] * 2,
        "start_ts": [T0] * 2,
        "end_ts": [end] * 2,
        "gpus": [1, 1],
    }
    wh.upsert("jobs", "c", "t", pl.DataFrame(jobs))
    spans = {
        "job_id": ["slice", "whole"],
        "attempt": [0, 0],
        "host": ["a1", "a1"],
        "gpu": [0, 1],
        "gpu_instance": [1, None],
        "mig_profile": ["1g.10gb", None],
        "start_ts": [T0] * 2,
        "end_ts": [end] * 2,
    }
    wh.upsert("job_gpus", "c", "t", pl.DataFrame(spans))
    analyze(Settings(data_dir=data_dir, cost=CostSettings(gpu_hour=prices)), quiet=True)


def test_money_by_job_user_and_model_mig_priced_by_slice(tmp_path: Path) -> None:
    _priced_cluster(tmp_path, {"*H100*": 9.0, "*A100*": 7.0})
    wh = Warehouse(tmp_path)
    jobs = {r["job_id"]: r for r in wh.read("job_usage", "c").iter_rows(named=True)}
    # (result tables are stored rounded to 6 decimals)
    # the slice: 1 h x 1/7 x 7 = 1.0; lost 10 min of it: 1/6; the whole GPU: 7.0, nothing lost
    assert jobs["slice"]["gpu_cost"] == pytest.approx(1.0)
    assert jobs["slice"]["lost_cost"] == pytest.approx(1 / 6, abs=1e-6)
    assert jobs["whole"]["gpu_cost"] == pytest.approx(7.0) and jobs["whole"]["lost_cost"] == 0
    res = CliRunner().invoke(
        app, ["report", "--by", "user", "--data-dir", str(tmp_path), "--format", "json"]
    )
    assert res.exit_code == 0, res.output
    users = {r["user"]: r for r in json.loads(res.stdout)}
    assert users["ann"]["lost_cost"] == pytest.approx(1 / 6, rel=1e-5)
    assert users["bob"]["cost"] == pytest.approx(7.0, rel=1e-5)
    model = (
        wh.read("waste_by_model", "c")
        .filter((pl.col("vc") == "(all)") & (pl.col("gpu_model") != "(all)"))
        .row(0, named=True)
    )
    assert model["cost"] == pytest.approx(8.0) and model["lost_cost"] == pytest.approx(
        1 / 6, abs=1e-6
    )
    assert model["gpu_h"] == pytest.approx(1 + 1 / 7, abs=1e-6)


def test_without_prices_no_money_columns_in_the_report(tmp_path: Path) -> None:
    _priced_cluster(tmp_path, {})
    assert Warehouse(tmp_path).read("job_usage", "c")["lost_cost"].null_count() == 2
    res = CliRunner().invoke(
        app, ["report", "--by", "vc", "--data-dir", str(tmp_path), "--format", "json"]
    )
    assert res.exit_code == 0, res.output
    (row,) = json.loads(res.stdout)
    assert "cost" not in row and "lost_cost" not in row


def test_the_cost_function_other_features_call() -> None:
    from gpuwaste.analyses.cost import money, price_per_gpu_hour
    from gpuwaste.config import CostSettings

    cost = CostSettings(gpu_hour={"*H100*": 4.0, "NVIDIA A100*": 2.5, "*": 1.0})
    assert price_per_gpu_hour(cost, "NVIDIA H100 80GB HBM3") == 4.0
    assert price_per_gpu_hour(cost, "NVIDIA A100-SXM4-80GB") == 2.5
    assert price_per_gpu_hour(cost, None) == 1.0  # the catch-all
    assert money(2 / 7, "NVIDIA A100-SXM4-80GB", cost) == pytest.approx(2.5 * 2 / 7)
    assert money(1.0, "x", CostSettings()) is None
    with pytest.raises(ValueError, match="a price must be 0 or more"):
        CostSettings(gpu_hour={"*": -1.0})


# --- shared GPUs ----------------------------------------------------------------------------


def test_a_shared_gpu_divides_its_time_among_its_sharers(tmp_path: Path) -> None:
    """Time-slicing: job a holds GPU 0 for minutes [0, 60), job b for [30, 90). Over [30, 60)
    each gets half, so a has 30 + 15 = 45 GPU minutes and b 15 + 30 = 45: together the 90
    minutes the GPU was held, counted once. The device is idle over minutes [70, 80) (b alone):
    b's idle slot, 10 wall minutes, counts with b's device share 45/60."""
    end = T0 + timedelta(minutes=90)
    samples = pl.DataFrame(
        {
            "host": ["h"] * 90,
            "gpu": [0] * 90,
            "ts": [T0 + timedelta(minutes=k) for k in range(90)],
            "util": [0.0 if 71 <= k <= 80 else 50.0 for k in range(90)],
            "mem_used_mib": [0.0 if 71 <= k <= 80 else 3000.0 for k in range(90)],
            "mem_total_mib": [81920.0] * 90,
        }
    )
    wh = Warehouse(tmp_path)
    wh.replace_window("gpu_samples", "c", T0, end, samples)
    starts = [T0, T0 + timedelta(minutes=30)]
    ends = [T0 + timedelta(minutes=60), end]
    jobs = {"job_id": ["a", "b"], "vc": ["v", "v"], "state": ["passed"] * 2, "gpus": [1, 1]}
    wh.upsert("jobs", "c", "t", pl.DataFrame({**jobs, "start_ts": starts, "end_ts": ends}))
    spans = {"job_id": ["a", "b"], "attempt": [0, 0], "host": ["h", "h"], "gpu": [0, 0]}
    wh.upsert("job_gpus", "c", "t", pl.DataFrame({**spans, "start_ts": starts, "end_ts": ends}))
    analyze(Settings(data_dir=tmp_path), quiet=True)
    usage = {r["job_id"]: r for r in wh.read("job_gpu_usage", "c").iter_rows(named=True)}
    assert usage["a"]["alloc_s"] == pytest.approx(45 * 60)
    assert usage["b"]["alloc_s"] == pytest.approx(45 * 60)
    assert usage["a"]["gpu_weight"] == pytest.approx(0.75)
    assert usage["a"]["idle_slot_s"] == 0
    assert usage["b"]["idle_slot_s"] == pytest.approx(10 * 60 * 0.75)
    for r in usage.values():
        parts = r["idle_slot_s"] + r["never_used_s"] + r["busy_s"] + r["missing_s"]
        assert parts == pytest.approx(r["alloc_s"])
    daily = wh.read("waste_daily", "c").filter(
        (pl.col("vc") == "(all)") & (pl.col("gpu_model") == "(all)")
    )
    assert daily["alloc_gpu_h"].sum() == pytest.approx(1.5)
    assert wh.read("job_usage", "c")["gpu_s"].sum() == pytest.approx(90 * 60)


def test_a_running_sharer_cut_at_its_hosts_newest_sample_shares_only_up_to_the_cut(
    tmp_path: Path,
) -> None:
    """Host g's telemetry is behind: its newest sample is at 300 s, another host's at 600 s (the
    watermark). Job b, running on GPU 0 since 0 s, is cut at g's newest sample + one sampling
    interval (30 s): 330 s. Job c held the same GPU from 230 s to 430 s (finished). Over
    [230, 330) they share: 50 s each; c alone holds [330, 430): c has 150 s, b 230 + 50 = 280.
    Together 430 s, the time the device was held, counted once (were b shared up to the
    watermark, c would get 100 s and 50 s of the device would go to nobody)."""
    at = [T0 + timedelta(seconds=s) for s in range(0, 601, 30)]
    g = [t for t in at if t <= T0 + timedelta(seconds=300)]
    samples = pl.DataFrame(
        {
            "host": ["g"] * len(g) + ["other"] * len(at),
            "gpu": [0] * (len(g) + len(at)),
            "ts": g + at,
            "util": [50.0] * (len(g) + len(at)),
            "mem_used_mib": [3000.0] * (len(g) + len(at)),
            "mem_total_mib": [81920.0] * (len(g) + len(at)),
        }
    )
    wh = Warehouse(tmp_path)
    wh.replace_window("gpu_samples", "c", T0, T0 + timedelta(seconds=601), samples)
    starts = [T0, T0 + timedelta(seconds=230)]
    ends = [None, T0 + timedelta(seconds=430)]
    jobs = {"job_id": ["b", "c"], "vc": ["v", "v"], "state": ["running", "passed"], "gpus": [1, 1]}
    wh.upsert("jobs", "c", "t", pl.DataFrame({**jobs, "start_ts": starts, "end_ts": ends}))
    spans = {"job_id": ["b", "c"], "attempt": [0, 0], "host": ["g", "g"], "gpu": [0, 0]}
    wh.upsert("job_gpus", "c", "t", pl.DataFrame({**spans, "start_ts": starts, "end_ts": ends}))
    analyze(Settings(data_dir=tmp_path), quiet=True)
    usage = {r["job_id"]: r for r in wh.read("job_gpu_usage", "c").iter_rows(named=True)}
    assert usage["c"]["alloc_s"] == pytest.approx(150)
    assert usage["b"]["alloc_s"] == pytest.approx(280)
    # conserved: the sharers' seconds add up to the device's held wall time, [0, 430)
    assert sum(r["alloc_s"] for r in usage.values()) == pytest.approx(430)
    # the same when each job is in a batch of its own (the sharer then is another batch's)
    as_of = T0 + timedelta(seconds=600, microseconds=1)  # the newest sample, as analyze takes it
    for job, want in (("c", 150), ("b", 280)):
        con = connect(tmp_path, dated=False)
        try:
            result = run_batch(con, "c", [job], Thresholds(), as_of, data_dir=tmp_path)
        finally:
            con.close()
        assert result.frames["job_gpu_usage"]["alloc_s"].to_list() == [pytest.approx(want)], job


def test_the_job_page_shows_the_instance_not_its_parent(tmp_path: Path) -> None:
    """The dashboard's job timeline of a MIG job reads its instance's samples, not those of the
    parent GPU (here at 99 %) or of other instances."""
    from gpuwaste.analyses import reads
    from gpuwaste.warehouse.catalog import connect

    _priced_cluster(tmp_path, {}, parent=True)
    con = connect(tmp_path)
    try:
        timeline = reads.job_timeline(con, "c", "slice")
    finally:
        con.close()
    assert timeline.height == 60 and set(timeline["util"].unique()) == {0.0, 60.0}


@pytest.mark.prometheus
def test_mig_series_through_a_real_prometheus_equal_the_file(tmp_path: Path) -> None:
    """The generated MIG hosts backfilled into a real Prometheus: the Prometheus source gives
    the same instance rows (device, profile, model, utilization, memory) as the file."""
    from harness.prometheus import running_prometheus

    from gpuwaste.config import ClusterConfig, OpenMetricsSource, PrometheusSource
    from gpuwaste.ingest.prometheus.openmetrics_source import ingest_openmetrics
    from gpuwaste.ingest.prometheus.source import ingest_prometheus

    spec = GeneratorSpec(seed=5, gpus=8, days=0.1, interval_s=15, cluster="m", mig_hosts=1)
    out = tmp_path / "src"
    write_all(spec, out)
    window = json.loads((out / "truth.json").read_text())["window"]
    since, until = (
        datetime.fromisoformat(window[k].replace("Z", "+00:00")) for k in ("start", "end")
    )
    cols = ["host", "gpu", "gpu_instance", "mig_profile", "gpu_model", "ts", "job_id", "util",
            "util_source", "mem_used_mib", "mem_total_mib"]  # fmt: skip
    with running_prometheus(out / "metrics.om", tmp_path / "prom") as server:
        cluster = ClusterConfig(name="m", prometheus=PrometheusSource(url=server.url))
        ingest_prometheus(
            Settings(data_dir=tmp_path / "a"), cluster, since=since, until=until, quiet=True,
            window_s=3600,
        )  # fmt: skip
    file_cluster = ClusterConfig(name="m", openmetrics=OpenMetricsSource(file=out / "metrics.om"))
    ingest_openmetrics(Settings(data_dir=tmp_path / "b"), file_cluster, out / "metrics.om")
    via_server, via_file = (
        Warehouse(tmp_path / d)
        .read("gpu_samples", "m")
        .filter(pl.col("host").str.starts_with("mig"))
        .select(cols)
        .sort("host", "gpu", "gpu_instance", "ts", "job_id", nulls_last=True)
        for d in ("a", "b")
    )
    assert via_server.height > 1000 and via_server["gpu_instance"].n_unique() == 5
    assert via_server.equals(via_file)
