"""The digests on a generated cluster: who qualifies follows the thresholds, each digest's
figures (GPU hours, and money at the prices the cluster was analyzed with) equal `report --by
user` (an independent query over the same tables), and every job a digest calls wasteful has
planted idle slots or never-used GPUs."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from gpuwaste.act.notify.run import Options, plan
from gpuwaste.analyses.waste_by import waste_by
from gpuwaste.config import CostSettings, NotifyConfig, Settings
from gpuwaste.warehouse.store import Warehouse
from tests.support.act_warehouse import PLANTED_CLUSTER, planted_warehouse

SINCE, UNTIL = datetime(2026, 10, 31, tzinfo=UTC), datetime(2026, 11, 2, tzinfo=UTC)
PRICES = CostSettings(currency="EUR", gpu_hour={"*": 2.5})  # the samples name no model


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    return planted_warehouse(tmp_path_factory.mktemp("planted"), cost=PRICES)


def test_digests_follow_the_thresholds_and_equal_the_warehouse(
    planted: tuple[Path, dict[str, Any]],
) -> None:
    data_dir, truth = planted
    cfg = NotifyConfig(
        min_wasted_gpu_hours=1.0, min_waste_share=0.15, address_template="{user}@example.org"
    )
    settings = Settings(data_dir=data_dir, notify=cfg)
    p, _ = plan(settings, Options(since="2026-10-31", until="2026-11-02"), datetime.now(UTC))
    digests = {m.digest.about: m.digest for m in p.messages if m.digest.kind == "user"}
    assert {m.recipient for m in p.messages} == {f"{u}@example.org" for u in digests}
    by_user = waste_by(settings, "user", cluster=PLANTED_CLUSTER, since=SINCE, until=UNTIL)
    jobs = Warehouse(data_dir).read("job_usage", PLANTED_CLUSTER)
    low_users = set(jobs.filter(pl.col("low_data"))["user"].to_list())
    checked = 0
    for row in by_user.iter_rows(named=True):
        user = row["user"]
        if user in low_users:
            continue  # their digest leaves low_data jobs out; report --by does not
        qualifies = row["lost_gpu_h"] >= 1.0 and row["lost_gpu_h"] / row["gpu_h"] >= 0.15
        assert (user in digests) == qualifies, user
        if qualifies:
            d = digests[user]
            assert d.lost_gpu_h == pytest.approx(row["lost_gpu_h"], rel=1e-9)
            assert d.gpu_h == pytest.approx(row["gpu_h"], rel=1e-9)
            assert f"of which {row['lost_gpu_h']:.2f} (" in d.body
            checked += 1
    assert checked >= 2
    planted_waste = {r["job_id"] for r in truth["idle_slots"]} | {
        r["job_id"] for r in truth["never_used"]
    }
    listed = {j for d in digests.values() for j in d.job_ids}
    assert listed and listed <= planted_waste
    flagged_low = set(jobs.filter(pl.col("low_data"))["job_id"].to_list())
    assert not listed & flagged_low


def test_low_data_jobs_are_counted_as_left_out(planted: tuple[Path, dict[str, Any]]) -> None:
    data_dir, _ = planted
    jobs = Warehouse(data_dir).read("job_usage", PLANTED_CLUSTER)
    low = jobs.filter(pl.col("low_data") & (pl.col("gpu_s") > 0))
    assert low.height > 0  # seed 3 plants gaps long enough to leave jobs with too little data
    user = low["user"][0]
    cfg = NotifyConfig(min_wasted_gpu_hours=0, min_waste_share=0, address_template="{user}@x.org")
    p, _ = plan(
        Settings(data_dir=data_dir, notify=cfg),
        Options(since="2026-10-31", until="2026-11-02"),
        datetime.now(UTC),
    )
    (d,) = [m.digest for m in p.messages if m.digest.about == user]
    n = low.filter(pl.col("user") == user).height
    assert f"{n} job(s) (" in d.body and "were left out: they have too little data" in d.body


def test_digests_money_equals_report_by_user(planted: tuple[Path, dict[str, Any]]) -> None:
    data_dir, _ = planted
    cfg = NotifyConfig(min_wasted_gpu_hours=0, min_waste_share=0, address_template="{user}@x.org")
    settings = Settings(data_dir=data_dir, notify=cfg, cost=PRICES)
    p, _ = plan(settings, Options(since="2026-10-31", until="2026-11-02"), datetime.now(UTC))
    digests = {m.digest.about: m.digest for m in p.messages if m.digest.kind == "user"}
    by_user = waste_by(settings, "user", cluster=PLANTED_CLUSTER, since=SINCE, until=UNTIL)
    low_users = set(
        Warehouse(data_dir).read("job_usage", PLANTED_CLUSTER).filter(pl.col("low_data"))["user"]
    )
    checked = 0
    for row in by_user.filter(~pl.col("user").is_in(low_users)).iter_rows(named=True):
        d = digests.get(row["user"])
        if d is None:
            continue  # lost nothing: no digest
        assert d.lost_cost == pytest.approx(row["lost_cost"], rel=1e-9)
        assert d.cost == pytest.approx(row["cost"], rel=1e-9)
        # one price for every GPU (the stored money is rounded to 6 decimals per GPU)
        assert d.lost_cost == pytest.approx(2.5 * d.lost_gpu_h, abs=1e-4)
        assert (
            f"The lost GPU hours cost {row['lost_cost']:,.2f} EUR (of {row['cost']:,.2f} EUR"
            in (d.body)
        )
        checked += 1
    assert checked >= 2
