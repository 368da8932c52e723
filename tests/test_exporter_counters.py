"""The exporter's counters only grow across incremental analyses (#44 item 3), with real
components: `gpuwaste generate` -> ingest + analyze the first 8 h of telemetry -> scrape the
exporter's HTTP server -> ingest + analyze the rest -> scrape again -> `analyze --rebuild` ->
scrape again.

The second part re-sorts earlier seconds among the kinds: GPUs that looked never used start
working, allocations that had no data get their samples (one host's samples lag half an hour
behind the others', as a slow scrape pipeline's do), zero stretches grow past the idle-slot
minimum. Prometheus reads any fall of a counter as a reset, so every series of
`gpuwaste_gpu_seconds_total` and `gpuwaste_energy_joules_total` must be non-decreasing from one
scrape to the next.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from gpuwaste.analyses import state
from gpuwaste.analyses.run import analyze
from gpuwaste.config import ClusterConfig, OpenMetricsSource, Settings, SlurmSource
from gpuwaste.exporter.collector import WasteCollector
from gpuwaste.exporter.metrics import COUNTERS
from gpuwaste.exporter.server import start
from gpuwaste.generate.cli import generate_command
from gpuwaste.ingest.run import run_configured
from gpuwaste.ingest.sources import SOURCES
from gpuwaste.warehouse.catalog import refresh_catalog
from gpuwaste.warehouse.store import Warehouse
from tests.test_exporter import Alloc, H, T, _rows

START = datetime(2026, 10, 31, 12, tzinfo=UTC)  # the generator's default window start
CUT = START + timedelta(hours=8)  # the first part's telemetry ends here ...
LAGGING_HOST, LAG = "gpu-node-001", timedelta(minutes=30)  # ... and this host's 30 min earlier

Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def split_metrics(metrics: Path, first: Path, second: Path) -> None:
    """Each sample line to `first` when it lies before its host's cut, else to `second`; the
    HELP/TYPE lines to both (each part a whole exposition)."""
    cut_s = CUT.timestamp()
    with metrics.open() as src, first.open("w") as one, second.open("w") as two:
        for line in src:
            if line.startswith("#"):
                one.write(line)
                two.write(line)
                continue
            cut = cut_s - LAG.total_seconds() if f'"{LAGGING_HOST}"' in line else cut_s
            (one if float(line.rsplit(" ", 1)[1]) < cut else two).write(line)


def scrape(data_dir: Path) -> Series:
    """The counters' samples as the exporter's HTTP server serves them."""
    httpd = start(WasteCollector(data_dir, cache_seconds=0), "127.0.0.1", 0)
    try:
        text = requests.get(f"http://127.0.0.1:{httpd.server_port}/metrics", timeout=60).text
    finally:
        httpd.shutdown()
        httpd.server_close()
    out: Series = {}
    for family in text_string_to_metric_families(text):
        if family.name in COUNTERS:
            for s in family.samples:
                if s.name.endswith("_total"):
                    out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


@pytest.fixture(scope="module")
def scrapes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Series]]:
    base = tmp_path_factory.mktemp("counters")
    generated = base / "cluster"
    generate_command(generated, 3, 16, 1.0, 60, None, "demo", False, policy_cases=True)
    parts = [base / "part1.om", base / "part2.om"]
    split_metrics(generated / "metrics.om", *parts)
    data_dir = base / "data"
    got: list[Series] = []
    for part in parts:
        settings = Settings(
            data_dir=data_dir,
            clusters=[
                ClusterConfig(
                    name="demo",
                    openmetrics=OpenMetricsSource(file=part),
                    slurm=SlurmSource(file=generated / "sacct.txt"),
                )
            ],
        )
        run_configured(settings, SOURCES)
        analyze(settings, quiet=True)
        got.append(scrape(data_dir))
    analyze(settings, rebuild=True, quiet=True)
    got.append(scrape(data_dir))
    yield got


@pytest.mark.slow  # about 30 s: a generated cluster analyzed three times
def test_every_counter_series_is_non_decreasing_across_incremental_analyses(
    scrapes: list[Series],
) -> None:
    first, second, rebuilt = scrapes
    # the counters are not empty after the first part, and the second adds to them
    for name in COUNTERS:
        assert any(k[0] == f"{name}_total" and v > 0 for k, v in first.items()), name
    assert sum(second.values()) > sum(first.values())
    fell = {k: (v, second.get(k)) for k, v in first.items() if not second.get(k, -1) >= v}
    assert not fell, f"counters that fell (before, after): {fell}"
    # a rebuild over the same data gives the same settled rows: nothing moves
    assert rebuilt == pytest.approx(second)


# ------------------------------------------------------------------- which rows are settled
# job -> (vc, debug, running, allocations), as in tests/test_exporter.py; the newest sample
# analyze saw is T
SETTLING: dict[str, tuple[str, bool, bool, list[Alloc]]] = {
    "run": ("nlp", False, True, [(T - 2 * H, T, 0, False, [])]),  # running
    "late": ("nlp", False, False, [(T - 2 * H, T - H / 2, 1800, False, [])]),  # ended T - 30 min
    "done": ("nlp", False, False, [(T - 3 * H, T - H, 0, True, [])]),  # ended T - 1 h, never used
}


def test_a_gpu_row_counts_once_its_job_ended_an_hour_before_the_newest_sample(
    tmp_path: Path,
) -> None:
    """Cluster `seen`: analyze saw samples up to T: only `done` counts (2 GPU hours, never used;
    500 W, 100 W lost). Cluster `blind`: analyze saw no sample, so there is nothing to wait for:
    every ended job counts at once, `late` (1.5 h, half an hour of it without data) too."""
    wh = Warehouse(tmp_path)
    fingerprints = tmp_path / "fingerprints.parquet"
    pl.DataFrame({"job_id": ["run"]}).write_parquet(fingerprints)
    for cluster, until in (("seen", T.isoformat()), ("blind", "")):
        for name, rows in _rows(cluster, SETTLING, 2.0).items():
            wh.replace_file(name, cluster, "built", rows)
        saved = state.AnalyzeState(ran_at=T.isoformat(), samples_until=until)
        state.save(tmp_path, cluster, saved, fingerprints, [])
    refresh_catalog(tmp_path, force=True)
    got = scrape(tmp_path)

    def counted(cluster: str, name: str, kind: str) -> float:
        return got[(name, (("cluster", cluster), ("kind", kind), ("vc", "nlp")))]

    seconds, joules = "gpuwaste_gpu_seconds_total", "gpuwaste_energy_joules_total"
    assert counted("seen", seconds, "allocated") == 2 * 3600
    assert counted("seen", seconds, "never_used") == 2 * 3600
    assert counted("seen", seconds, "busy") == counted("seen", seconds, "missing") == 0
    assert counted("seen", joules, "used") == pytest.approx(2 * 0.5 * 3.6e6)
    assert counted("seen", joules, "lost") == pytest.approx(2 * 0.1 * 3.6e6)
    assert counted("blind", seconds, "allocated") == 3.5 * 3600
    assert counted("blind", seconds, "missing") == 1800
    assert counted("blind", seconds, "busy") == 3600
