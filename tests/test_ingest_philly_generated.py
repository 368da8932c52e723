"""The generator's planted Philly jobs and samples come back through `ingest philly`.

The default window (2026-10-31 12:00Z, one day) spans the US Pacific fall-back, so the job log
has naive times in the repeated hour and the utilization files carry both PDT and PST rows.
"""

from __future__ import annotations

import csv
import json
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import polars as pl
import pytest

from gpuwaste.config import ClusterConfig, PhillySource, Settings
from gpuwaste.generate import GeneratorSpec, write_all
from gpuwaste.ingest.philly.source import ingest_philly
from gpuwaste.warehouse.store import Warehouse

SPEC = GeneratorSpec(seed=5, gpus=32, days=1.0, cluster="gen")
PACIFIC = ZoneInfo("America/Los_Angeles")


def iso(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text.replace("Z", "+00:00"))


def same_or_other_reading(got: datetime | None, want: datetime | None) -> bool:
    """Equal, or the other reading of a naive Pacific time in the repeated hour."""
    if got == want:
        return True
    if got is None or want is None:
        return False
    local = want.astimezone(PACIFIC)
    return got == local.replace(fold=1 - local.fold).astimezone(UTC)


@pytest.fixture(scope="module")
def ingested(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Warehouse, dict[str, object]]:
    base = tmp_path_factory.mktemp("philly")
    write_all(SPEC, base / "out")
    c = ClusterConfig(name="ph", philly=PhillySource(dir=base / "out" / "philly"))
    r = ingest_philly(Settings(data_dir=base / "wh"), c)
    assert r.refused == []
    truth = json.loads((base / "out" / "truth.json").read_text())
    return base / "out" / "philly", Warehouse(base / "wh"), truth


def test_planted_jobs_and_attempts(ingested: tuple[Path, Warehouse, dict[str, object]]) -> None:
    _, wh, truth = ingested
    jobs_t: list[dict[str, object]] = truth["jobs"]  # type: ignore[assignment]
    vc_map: dict[str, str] = truth["philly_vc_map"]  # type: ignore[assignment]
    user_map: dict[str, str] = truth["philly_user_map"]  # type: ignore[assignment]
    chains: dict[str, list[dict[str, object]]] = {}
    for j in jobs_t:
        if j["philly_jobid"] is not None:
            chains.setdefault(str(j["philly_jobid"]), []).append(j)
    got = {r["job_id"]: r for r in wh.read("jobs", "ph").iter_rows(named=True)}
    assert set(got) == set(chains) and len(got) > 50
    gpus_got = wh.read("job_gpus", "ph")
    repeated = 0
    for pid, members in chains.items():
        # Attempts in order; a job cancelled before it started (no attempt) ends the chain.
        members.sort(key=lambda j: (j["philly_attempt"] is None, j["philly_attempt"] or 0))
        row = got[pid]
        first = members[0]
        assert row["vc"] == vc_map[str(first["vc"])] and row["user"] == user_map[str(first["user"])]
        assert row["state"] == members[-1]["state"]
        attempts: list[dict[str, object]] = first["attempts"]  # type: ignore[assignment]
        n_first = sum(len(d["gpus"]) for d in attempts[0]["detail"]) if attempts else 0  # type: ignore[index,arg-type,misc]
        assert row["gpus"] == n_first
        want_rows = set()
        for a, att in enumerate(attempts):
            if att["start"] is None or att["end"] is None:
                continue
            for d in att["detail"]:  # type: ignore[attr-defined]
                for g in d["gpus"]:
                    want_rows.add((a, d["ip"], int(g[3:]), iso(att["start"]), iso(att["end"])))  # type: ignore[arg-type]
        mine = gpus_got.filter(pl.col("job_id") == pid)
        assert {(a, h, g) for a, h, g, *_ in want_rows} == set(
            mine.select("attempt", "host", "gpu").rows()
        )
        for a, h, g, s, e in want_rows:
            r = mine.filter((pl.col("attempt") == a) & (pl.col("host") == h) & (pl.col("gpu") == g))
            gs, ge = r["start_ts"][0], r["end_ts"][0]
            if (gs, ge) != (s, e):
                repeated += 1
                assert same_or_other_reading(gs, s) and same_or_other_reading(ge, e)
            assert ge >= gs
    quirks: dict[str, list[dict[str, object]]] = truth["philly_quirks"]  # type: ignore[assignment]
    for q in quirks["none_end"] + quirks["none_start"]:
        jid, att = str(q["jobid"]), int(q["attempt"])  # type: ignore[call-overload]
        assert gpus_got.filter((pl.col("job_id") == jid) & (pl.col("attempt") == att)).height == 0


def test_samples_keep_both_fall_back_hours(
    ingested: tuple[Path, Warehouse, dict[str, object]],
) -> None:
    folder, wh, _ = ingested
    samples = wh.read("gpu_samples", "ph")
    # Independent count with the csv module and the README's rule for 18-field rows.
    expected = 0
    labels = set()
    with open(folder / "cluster_gpu_util", newline="") as fh:
        rows = csv.reader(fh)
        next(rows)
        for row in rows:
            vals = row[2:][::2] if len(row) == 18 else row[2:10]
            expected += sum(1 for v in vals if v != "NA")
            labels.add(row[0])
    assert samples.height == expected
    assert samples.select("host", "gpu", "ts").is_unique().all()
    assert samples["ts"].n_unique() == len(labels)  # 01:xx PDT and 01:xx PST stay apart
    assert any(x.endswith("PST") for x in labels) and any(x.endswith("PDT") for x in labels)
    host = wh.read("host_samples", "ph")
    assert host["cpu_util"].null_count() == 3 and host["mem_used_frac"].null_count() == 4
