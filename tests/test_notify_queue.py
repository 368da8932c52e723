"""`gpuwaste notify` tells a user whose idle GPUs kept other users' jobs waiting, with the figures
of queue_idle_overlap (docs/definitions.md#waiting-behind-idle-gpus)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from gpuwaste.act.notify.digest import Window, waited_sentence, window_figures
from gpuwaste.analyses.run import analyze
from gpuwaste.analyses.waste_by import waste_by
from gpuwaste.config import Settings
from gpuwaste.warehouse.catalog import connect
from gpuwaste.warehouse.store import Warehouse
from tests.support.act_warehouse import add_job, with_low_data_job
from tests.support.two_jobs import T0
from tests.test_notify import CONFIG, notify
from tests.test_notify_money import OWNERS


@pytest.fixture(scope="module")
def waited(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """The act warehouse (ann's job a with an idle slot on GPU 0, bob's never-used GPU 1, ann's
    job c on GPU 2; ann in VC vision, bob in speech), plus dan's 2-GPU job w (vision), submitted
    at T0 and started 20 minutes later on GPUs 0 and 3 (a's ended): with one GPU free it waited
    for capacity while ann's and bob's GPUs idled. (On GPU 3 alone it would have waited while a
    GPU was free: cause `other`, no one's idle GPUs kept it waiting.) With VC owners: the
    digests of the users and of the VCs, from one `notify`."""
    tmp_path = tmp_path_factory.mktemp("queue")
    data_dir = with_low_data_job(tmp_path / "wh")
    (tmp_path / "gpuwaste.toml").write_text(CONFIG + OWNERS)
    start, end = T0 + timedelta(seconds=1200), T0 + timedelta(seconds=2400)
    add_job(data_dir, "w", "dan", "vision", T0, start, end, [0, 3])
    analyze(Settings(data_dir=data_dir), quiet=True)
    r = notify(data_dir)
    assert r.returncode == 0, r.stderr
    return data_dir, r


def test_the_digest_says_how_long_others_waited_behind_your_idle_gpus(
    waited: tuple[Path, Any],
) -> None:
    data_dir, r = waited
    overlap = Warehouse(data_dir).read("queue_idle_overlap", "c")
    ann = overlap.filter(pl.col("holder_user") == "ann")
    assert ann["job_id"].to_list() == ["w"] and ann["blocked_gpu_s"][0] > 0
    hours = ann["blocked_gpu_s"].sum() / 3600
    assert (
        f"While your GPUs sat idle, 1 job(s) of other users waited {hours:.2f} GPU hours"
        in r.stdout
    )


def test_the_vc_digest_says_how_long_others_waited_behind_the_vc_s_idle_gpus(
    waited: tuple[Path, Any],
) -> None:
    """Per VC as `report --by vc` counts it: other users' waits behind the idle GPUs of the VC's
    jobs (dan's wait behind ann's GPUs counts for vision though dan is in vision too); in each
    VC's own digest, after its totals."""
    data_dir, r = waited
    overlap = Warehouse(data_dir).read("queue_idle_overlap", "c").filter(~pl.col("same_user"))
    digests = r.stdout.split("Owners of VC ")[1:]
    assert sorted(d.split(",")[0] for d in digests) == ["speech", "vision"]
    for digest in digests:
        vc = digest.split(",")[0]
        mine = overlap.filter((pl.col("holder_vc") == vc) & (pl.col("blocked_gpu_s") > 0))
        assert mine.height
        hours = mine["blocked_gpu_s"].sum() / 3600
        sentence = (
            f"While the VC's GPUs sat idle, {mine['job_id'].n_unique()} job(s) of other users "
            f"waited {hours:.2f} GPU hours for GPUs that the VC's could have given them."
        )
        assert " ".join(digest.split()).count(sentence) == 1, digest


def test_a_colleague_s_wait_is_not_also_the_vc_s_own(waited: tuple[Path, Any]) -> None:
    """dan's wait (VC vision) behind ann's idle GPUs (vision) counts among others' waits in
    vision's digest (above), not again as the VC's own: no user waited behind their own idle
    GPUs, so no digest has the own line (as `report --by vc`'s own_blocked_gpu_h: same_user)."""
    data_dir, r = waited
    overlap = Warehouse(data_dir).read("queue_idle_overlap", "c")
    colleague = overlap.filter(pl.col("same_vc") & ~pl.col("same_user"))
    assert colleague["blocked_gpu_s"].sum() > 0
    assert overlap.filter(pl.col("same_user"))["blocked_gpu_s"].sum() == 0
    assert "Owners of VC vision" in r.stdout
    assert "could have run them" not in r.stdout


@pytest.mark.parametrize("by", ["user", "vc"])
def test_the_digest_s_waits_are_report_by_s(waited: tuple[Path, Any], by: str) -> None:
    """The digests and `report --by user|vc` count the waits behind a holder's idle GPUs alike,
    in the same window (one definition: sql/reports/waited_by.sql)."""
    data_dir, _ = waited
    window = Window(T0 - timedelta(hours=1), T0 + timedelta(days=1))
    con = connect(data_dir)
    try:
        figures = window_figures(con, "c", window, 5)
    finally:
        con.close()
    digest = figures.waited if by == "user" else figures.vc_waited
    report = waste_by(Settings(data_dir=data_dir), by, cluster="c", since=window.start,
                      until=window.end).filter(pl.col("others_waits").is_not_null())  # fmt: skip
    assert report.height == digest.height == 2  # ann and bob; vision and speech
    theirs = {r[by]: r for r in report.iter_rows(named=True)}
    for row in digest.iter_rows(named=True):
        mine = theirs[row["who"]]
        assert row["waits"] == mine["others_waits"] > 0
        assert row["waited_gpu_h"] == pytest.approx(mine["others_waited_gpu_h"])
        assert row["own_waited_gpu_h"] == mine["own_blocked_gpu_h"]


def test_the_own_waits_line_names_whose_gpus() -> None:
    """Per VC, own waits are its users' behind their own idle GPUs in the VC."""
    row = {"waits": 0, "waited_gpu_h": 0.0, "own_waits": 5, "own_waited_gpu_h": 1.2}
    args = ("the VC's GPUs", "the VC's", "of the VC's users", "their own GPUs in the VC")
    assert waited_sentence(row, *args) == [
        "",
        "5 job(s) of the VC's users waited 1.20 GPU hours while their own GPUs in the VC sat "
        "idle and could have run them.",
    ]
    assert waited_sentence(None, *args) == []


def test_a_report_since_counts_the_waits_dated_since(waited: tuple[Path, Any]) -> None:
    """`report --since` of a summary over waits (waits_behind_idle, queue_cause_summary) counts
    the stored waits that ended since the time (Analysis.dated_by), as `report queue_causes
    --since` lists them: dan's wait ended at T0 + 20 min, so it counts from a period starting
    then, not from one starting a second later (before: both printed the all-time rows)."""
    from gpuwaste.analyses.report import report

    data_dir, _ = waited
    settings = Settings(data_dir=data_dir)
    ended = T0 + timedelta(seconds=1200)

    def figures(since: Any) -> tuple[int, int, int]:
        waits = report(settings, "waits_behind_idle", cluster="c", since=since)
        every = waits.filter(pl.col("vc") == "(all)").row(0, named=True)
        causes = report(settings, "queue_causes", cluster="c", since=since)
        summary = report(settings, "queue_cause_summary", cluster="c", since=since)
        started = summary.filter(pl.col("size_class") == "all")["waits"]
        return every["blocked_waits"], causes.height, int(started.max() or 0)

    stored = Warehouse(data_dir).read("queue_causes", "c")
    assert stored.filter(pl.col("job_id") == "w")["wait_end"].to_list() == [ended]
    assert figures(None)[0] == figures(ended)[0] == 1
    dated = stored.filter(pl.col("wait_end") >= ended).height
    assert 0 < dated < stored.height
    assert figures(ended)[1:] == (dated, dated)
    assert figures(ended + timedelta(seconds=1)) == (0, 0, 0)
