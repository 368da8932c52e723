"""Money in `gpuwaste notify` digests and `gpuwaste job`, when `[cost]` prices the GPUs.

Hand-computed on tests/support/act_warehouse.py's `with_low_data_job`, analyzed at 6 EUR per GPU
hour: job a (ann, VC vision) held 1200 s = 2.00 EUR, of which 300 s in an idle slot = 0.50 EUR;
job b (bob, VC speech) held 1200 s on a never-used GPU: 2.00 EUR, all lost; job c (ann, vision)
has too little data and counts in no figure (money included). Without `[cost]`, nothing about
money is said. On MIG instances, the digest's hours and money are slice-weighted, as
`report --by user` gives them.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from gpuwaste.act.notify.run import Options, plan
from gpuwaste.analyses.waste_by import waste_by
from gpuwaste.cli import app
from gpuwaste.config import CostSettings, NotifyConfig, Settings
from gpuwaste.warehouse.store import Warehouse
from tests.support.act_warehouse import with_low_data_job
from tests.support.smtp import smtp_server
from tests.test_mig import T0 as MIG_T0
from tests.test_mig import _priced_cluster
from tests.test_notify import CONFIG, notify

PRICES = CostSettings(currency="EUR", gpu_hour={"*": 6.0})
COST = '\n[cost]\ncurrency = "EUR"\n[cost.gpu_hour]\n"*" = 6.0\n'
OWNERS = 'vc_owners = { vision = ["lead@example.org"], speech = ["sp@example.org"] }\n'
SEND = ["--send", "--sender", "gpuwaste@example.org"]
MONEY = re.compile(r"EUR|USD|cost", re.IGNORECASE)


@pytest.fixture(scope="module")
def priced(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return with_low_data_job(tmp_path_factory.mktemp("priced") / "wh", cost=PRICES)


def lost_cost(data_dir: Path, job_id: str) -> float:
    jobs = Warehouse(data_dir).read("job_usage", "c").filter(pl.col("job_id") == job_id)
    return float(jobs["lost_cost"][0])


def test_mails_carry_the_money_lost_per_job_user_and_vc(priced: Path) -> None:
    (priced.parent / "gpuwaste.toml").write_text(CONFIG + OWNERS + COST)
    assert lost_cost(priced, "a") == pytest.approx(0.5) and lost_cost(priced, "b") == 2.0
    with smtp_server() as smtp:
        r = notify(priced, *SEND, "--smtp", smtp.url)
        assert r.returncode == 0, r.stderr
        (ann,) = smtp.to("ann@example.org")
        assert ann["Subject"] == (
            "gpuwaste: 0.08 GPU hours (0.50 EUR) lost on c, 2026-11-01 to 2026-11-02"
        )
        body = ann.get_content()
        assert (
            "held 0.33 GPU hours, of which 0.08 (25 %) were lost: 0.08 in idle slots and 0.00 on "
            "GPUs never used. The lost GPU hours cost 0.50 EUR (of 2.00 EUR for all the GPU hours "
            "held)."
        ) in body
        assert "never-used GPUs), costing 0.50 EUR; GPU utilization" in body
        assert "in EUR; a GPU whose model has no price counts as nothing." in body
        (vision,) = smtp.to("lead@example.org")
        assert vision["Subject"].startswith("gpuwaste: VC vision lost 0.08 GPU hours (0.50 EUR)")
        assert "* ann: 0.08 of 0.33, costing 0.50 EUR" in vision.get_content()
        (speech,) = smtp.to("sp@example.org")
        text = speech.get_content()
        assert "The lost GPU hours cost 2.00 EUR (of 2.00 EUR for all the GPU hours held)." in text
        assert "* bob\\x1b[2J: 0.33 of 0.33, costing 2.00 EUR" in text


def test_no_money_without_prices_in_the_configuration(priced: Path) -> None:
    (priced.parent / "gpuwaste.toml").write_text(CONFIG + OWNERS)
    with smtp_server() as smtp:
        r = notify(priced, *SEND, "--smtp", smtp.url)
        assert r.returncode == 0, r.stderr
        assert len(smtp.handler.received) == 3
        for address in ("ann@example.org", "lead@example.org", "sp@example.org"):
            (msg,) = smtp.to(address)
            assert not MONEY.search(msg["Subject"] + msg.get_content()), address


def test_no_money_where_the_analysis_had_no_price(tmp_path: Path) -> None:
    unpriced = with_low_data_job(tmp_path / "wh")
    (tmp_path / "gpuwaste.toml").write_text(CONFIG + COST)
    r = notify(unpriced)
    assert r.returncode == 0, r.stderr
    assert "=== email to ann@example.org" in r.stdout and not MONEY.search(r.stdout)


def test_the_job_report_says_the_money_lost(priced: Path) -> None:
    config = priced.parent / "job.toml"

    def job_b() -> str:
        args = ["job", "b", "--data-dir", str(priced), "--config", str(config)]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        return result.stdout

    config.write_text(COST)
    assert "money lost 2.00 EUR of 2.00 EUR (GPU hours x the [cost] price" in job_b()
    config.write_text("")
    assert not MONEY.search(job_b())


def test_a_mig_instance_counts_by_its_slice_as_report_by_user(tmp_path: Path) -> None:
    # `slice` (ann): a 1g.10gb of an A100 at 7.00 per GPU hour for an hour, 10 min idle:
    # 1/7 GPU hour = 1.00, of which 10/60 x 1/7 GPU hour lost = 0.17; `whole` (bob): 1 GPU hour
    prices = CostSettings(currency="EUR", gpu_hour={"*A100*": 7.0})
    _priced_cluster(tmp_path, dict(prices.gpu_hour))
    cfg = NotifyConfig(min_wasted_gpu_hours=0, min_waste_share=0, address_template="{user}@x.org")
    settings = Settings(data_dir=tmp_path, notify=cfg, cost=prices)
    since, until = MIG_T0 - timedelta(hours=1), MIG_T0 + timedelta(hours=2)
    p, _ = plan(settings, Options(since=since.isoformat(), until=until.isoformat()), _now())
    (ann,) = [m.digest for m in p.messages if m.digest.about == "ann"]
    assert ann.gpu_h == pytest.approx(1 / 7, rel=1e-5)
    assert ann.lost_gpu_h == pytest.approx(1 / 42, rel=1e-4)
    assert ann.cost == pytest.approx(1.0, rel=1e-5)
    assert ann.lost_cost == pytest.approx(1 / 6, rel=1e-4)
    by_user = waste_by(settings, "user", since=since, until=until).filter(pl.col("user") == "ann")
    assert ann.lost_cost == pytest.approx(by_user["lost_cost"][0], rel=1e-9)
    assert ann.gpu_h == pytest.approx(by_user["gpu_h"][0], rel=1e-9)
    assert "0.02 GPU hours (0.17 EUR) lost" in ann.subject


def _now() -> datetime:
    return datetime.now(UTC)
