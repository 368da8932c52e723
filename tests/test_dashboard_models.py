"""The dashboard's GPU model filter and money per user and VC, run headless by AppTest.

The result warehouse's jobs take its two models in turn (bench/harness/result_warehouse.py); its
summaries hold each model's rows beside the '(all)' rows, as `gpuwaste analyze` writes them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import polars as pl
import pytest
from harness.result_warehouse import KEY, MODELS, Built, build_result_warehouse, rolled_up
from streamlit.testing.v1 import AppTest

import gpuwaste.dashboard
from gpuwaste.config import DATA_DIR_ENV
from gpuwaste.warehouse.catalog import refresh_catalog
from gpuwaste.warehouse.store import Warehouse
from tests.test_dashboard_app import _open

APP = str(Path(gpuwaste.dashboard.__file__).parent / "app.py")
A100, H100 = MODELS
PRICE = {A100: 2.5, H100: 4.0}  # per GPU hour, as [cost] would give


@pytest.fixture(scope="module")
def priced(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """Two models, and money on every job: its GPU hours (and those lost) x its model's price."""
    built = build_result_warehouse(tmp_path_factory.mktemp("wh") / "data", n_jobs=300, seed=7)
    price = pl.col("gpu_model").replace_strict(PRICE, return_dtype=pl.Float64)
    jobs = built.jobs.drop("cluster").with_columns(
        gpu_cost=pl.col("gpu_s") / 3600 * price,
        lost_cost=(pl.col("idle_slot_gpu_s") + pl.col("never_used_gpu_s")) / 3600 * price,
    )
    wh = Warehouse(built.data_dir)
    wh.replace_file("job_usage", built.cluster, KEY, jobs)
    # the Overview's sums per VC, model and user with the money, as analyze writes them beside
    lost = rolled_up("lost_by_user", "job_usage", jobs, built.cluster)
    wh.replace_file("lost_by_user", built.cluster, KEY, lost)
    refresh_catalog(built.data_dir, force=True)
    return Built(**{**built.__dict__, "jobs": jobs.with_columns(cluster=pl.lit(built.cluster))})


@pytest.fixture(scope="module")
def one_model(tmp_path_factory: pytest.TempPathFactory) -> Built:
    return build_result_warehouse(
        tmp_path_factory.mktemp("wh1") / "data", n_jobs=120, seed=2, models=(A100,)
    )


def _app(built: Built, monkeypatch: pytest.MonkeyPatch) -> AppTest:
    monkeypatch.setenv(DATA_DIR_ENV, str(built.data_dir))
    return AppTest.from_file(APP, default_timeout=60)


@pytest.fixture
def app(priced: Built, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], AppTest]]:
    """A fresh app per page view (a view's URL is read on its first run)."""
    yield lambda: _app(priced, monkeypatch)


def _metric(at: AppTest, label: str) -> float:
    (value,) = [str(m.value).replace(",", "").removesuffix(" GPU h") for m in at.metric
                if m.label == label]  # fmt: skip
    return float(value)


def _table(at: AppTest, column: str) -> pl.DataFrame:
    """The one table on the page with this column title."""
    (frame,) = [pl.from_pandas(d.value) for d in at.dataframe if column in d.value.columns]
    return frame


def test_overview_follows_the_model_filter(app: Callable[[], AppTest], priced: Built) -> None:
    hours = {m: g["gpu_s"].sum() / 3600 for (m,), g in priced.jobs.group_by("gpu_model")}
    at = _open(app(), model=H100)
    assert set(at.sidebar.multiselect(key="model").options) == set(MODELS)
    assert at.sidebar.multiselect(key="model").value == [H100]
    assert f"GPU model {H100}" in at.text[0].value
    assert _metric(at, "GPU hours allocated") == pytest.approx(hours[H100], abs=0.5)
    top = _table(at, "Job id")["Job id"].to_list()
    models = dict(priced.jobs.select("job_id", "gpu_model").iter_rows())
    assert top and {models[j] for j in top} == {H100}
    # per job too (a user filter): the same jobs' GPU rows
    at = _open(app(), model=H100, user="user0000")
    want = priced.jobs.filter((pl.col("gpu_model") == H100) & (pl.col("user") == "user0000"))
    assert _metric(at, "GPU hours allocated") == pytest.approx(want["gpu_s"].sum() / 3600, abs=0.5)


def test_both_models_are_every_model(app: Callable[[], AppTest], priced: Built) -> None:
    total = priced.jobs["gpu_s"].sum() / 3600
    assert _metric(_open(app()), "GPU hours allocated") == pytest.approx(total, abs=0.5)
    both = _open(app(), model=list(MODELS))
    assert _metric(both, "GPU hours allocated") == pytest.approx(total, abs=1.0)


def test_money_per_user_and_vc(app: Callable[[], AppTest], priced: Built) -> None:
    at = _open(app(), model=A100)
    (per_vc,) = [
        pl.from_pandas(d.value)
        for d in at.dataframe
        if "Money lost" in d.value.columns and d.value.columns[0] == "VC"
    ]
    users = [d for d in at.dataframe if "User" in d.value.columns]
    assert users and "Money lost" in users[0].value.columns
    want = (
        priced.jobs.filter(pl.col("gpu_model") == A100)
        .group_by("vc")
        .agg(pl.col("lost_cost").sum())
    )
    got = dict(per_vc.select("VC", "Money lost").iter_rows())
    assert got == pytest.approx(dict(want.iter_rows()), abs=0.051)  # shown to 0.1
    assert [s.value for s in at.subheader].count("Money lost per VC") == 1


def test_pages_apply_the_filter_without_error(app: Callable[[], AppTest]) -> None:
    for page in ("waste", "cdfs", "now", "policies"):
        at = _open(app(), page, model=[A100])
        assert at.sidebar.multiselect(key="model").value == [A100]
    waste = _open(app(), "waste", model=list(MODELS))
    vc_table = _table(waste, "Idle slots (% own)")
    assert set(vc_table["GPU model"]) == set(MODELS)  # two models: the column tells them apart


def test_no_model_filter_nor_money_with_one_model(
    one_model: Built, monkeypatch: pytest.MonkeyPatch
) -> None:
    at = _open(_app(one_model, monkeypatch))
    assert all(w.key != "model" for w in at.sidebar.multiselect)
    assert "Money lost per VC" not in [s.value for s in at.subheader]
    users = [d for d in at.dataframe if "User" in d.value.columns]
    assert users and "Money lost" not in users[0].value.columns
    waste = _open(_app(one_model, monkeypatch), "waste")
    assert "GPU model" not in _table(waste, "Idle slots (% own)").columns
    linked = _open(_app(one_model, monkeypatch), model=A100)  # a link with a model: shown all
    assert any("model" in w.value for w in linked.warning)
