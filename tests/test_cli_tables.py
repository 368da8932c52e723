"""Every table the command line prints, through the real command (typer's runner on
`gpuwaste.cli.app`) at 80 and 160 columns: every `report` name of the registry, `report --by`,
`policy replay` and `sql`. Every column but `sql`'s is declared in gpuwaste/columns.py's COLUMNS
(a new analysis's columns get titles and units for people, not ones from their names). No header
and no value is cut (each shown header is a whole title of gpuwaste/columns.py, each value the
whole formatted value), no number is in exponent form, no line is wider than the terminal, and a
column left out is named under the table.

The warehouse: a generated cluster ingested from its own formats (OpenMetrics, sacct, with a MIG
host) and its Philly trace as a second cluster, analyzed with a price ([cost]) so that money
columns have values. The frame each command prints is read through the same library call the
command makes, with its types.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import polars as pl
import pytest

from gpuwaste.act.policy.replay import open_warehouse, replay
from gpuwaste.act.policy.rule import make_rule
from gpuwaste.analyses.registry import BY_NAME
from gpuwaste.analyses.report import REPORTS, report
from gpuwaste.analyses.waste_by import BY, waste_by
from gpuwaste.columns import COLUMNS, Column, Rank, byte_size, column, number
from gpuwaste.config import Settings, load_settings
from gpuwaste.generate.cli import generate_command
from gpuwaste.render import TEXT_WIDTH, _cells, _fit, most_first, render, single_member_rollups
from gpuwaste.warehouse.bounded import Bounds, query_frame
from gpuwaste.warehouse.results import ALL_VCS, ROLLUP_COLUMNS
from tests.support.cli_width import invoke

EXPONENT = re.compile(r"\d[eE][+-]?\d")
WIDTHS = (80, 160)
SQL = "select * from waste_by_vc where gpu_model = '(all)'"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of gpuwaste.toml (its data_dir: wh) and of the generated input (gen)."""
    root = tmp_path_factory.mktemp("site")
    gen = root / "gen"
    generate_command(gen, seed=11, gpus=32, days=0.5, interval_s=60, mig_hosts=1)
    (root / "gpuwaste.toml").write_text(
        f'data_dir = "{root / "wh"}"\n[cost]\ncurrency = "EUR"\n[cost.gpu_hour]\n"*A100*" = 2.5\n'
    )
    config = ["--config", str(root / "gpuwaste.toml")]
    for args in (
        ["openmetrics", "--file", str(gen / "metrics.om"), "--cluster", "gen"],
        ["slurm", "--file", str(gen / "sacct.txt"), "--cluster", "gen", "--timezone", "UTC"],
        ["philly", str(gen / "philly"), "--cluster", "philly-gen"],
    ):
        invoke("ingest", *config, *args, "--quiet", width=160)
    invoke("analyze", *config, "--quiet", width=160)
    return root


def settings_of(site: Path) -> Settings:
    return load_settings(site / "gpuwaste.toml", None)


def shown_by(site: Path, *args: str, width: int) -> str:
    return invoke(*args, "--config", str(site / "gpuwaste.toml"), width=width).stdout


def _table(text: str) -> tuple[list[str], list[list[str]], str]:
    """(the header of each column, its wrapped lines joined; the cells of each body line; the
    text under the table)."""
    lines = text.splitlines()
    top = next(i for i, line in enumerate(lines) if line.startswith("┏"))
    rule = next(i for i, line in enumerate(lines) if line.startswith("┡"))
    end = next(i for i, line in enumerate(lines) if line.startswith("└"))
    cells = [[c.strip() for c in line.strip("┃").split("┃")] for line in lines[top + 1 : rule]]
    headers = [" ".join(filter(None, (row[k] for row in cells))) for k in range(len(cells[0]))]
    body = [[c.strip() for c in line.strip("│").split("│")] for line in lines[rule + 1 : end]]
    return headers, body, " ".join(" ".join(lines[end + 1 :]).split())


def check_table(
    text: str, width: int, frame: pl.DataFrame, rollups: dict[str, str], readable: bool = True
) -> None:
    """`text` shows `frame` whole: the asserts of the module's docstring."""
    assert "…" not in text and not EXPONENT.search(text), text
    assert all(len(line) <= width for line in text.splitlines()), text
    if readable:
        undeclared = [c for c in frame.columns if c not in COLUMNS]
        assert not undeclared, f"declare {undeclared} in gpuwaste/columns.py's COLUMNS"
    headers, body, under = _table(text)
    spec = {c: column(c) if readable else Column(c) for c in frame.columns}
    name_of = {s.title: c for c, s in spec.items()}
    assert len(name_of) == frame.width, "two columns share a title"
    for h in headers:
        assert h in name_of, f"header {h!r} is not a whole title ({sorted(name_of)})"
    shown = [name_of[h] for h in headers]
    one_cluster = "cluster" in frame.columns and frame["cluster"].n_unique() == 1
    for c in frame.columns:
        if c not in shown and not (c == "cluster" and one_cluster):
            assert spec[c].title in under, f"{c} is left out without a word: {under!r}"
    rows = single_member_rollups(frame, rollups).head(200)
    for k, name in enumerate(shown):
        printed = {row[k] for row in body if len(row) > k}
        values = _cells(rows[name], spec[name])
        missing = [v for v in values if len(v) <= TEXT_WIDTH and v not in printed]
        assert not missing, (name, missing[:5], text)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", REPORTS)
def test_every_report_fits_whole(site: Path, name: str, width: int) -> None:
    frame = report(settings_of(site), name)
    assert frame.height, f"the site has no {name} rows: the test would check nothing"
    if name in BY_NAME and BY_NAME[name].most_first:  # the rows the terminal lists
        frame = most_first(frame, BY_NAME[name].most_first)[0]
    check_table(shown_by(site, "report", name, width=width), width, frame, ROLLUP_COLUMNS)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("by", BY)
def test_every_waste_list_fits_whole(site: Path, by: str, width: int) -> None:
    frame = waste_by(settings_of(site), by)
    assert frame.height
    check_table(shown_by(site, "report", "--by", by, width=width), width, frame, ROLLUP_COLUMNS)


@pytest.mark.parametrize("jobs", [False, True])
def test_the_policy_replay_fits_80_columns(site: Path, jobs: bool) -> None:
    args = ["policy", "replay", "--idle-hours", "0.5,1,2", *(["--jobs"] if jobs else [])]
    con = open_warehouse(settings_of(site).data_dir, None)
    try:
        frame = replay(con, make_rule(["0.5,1,2"]), jobs=jobs)
    finally:
        con.close()
    assert frame.height
    check_table(shown_by(site, *args, width=80), 80, frame, {"vc": ALL_VCS})


def test_sql_fits_80_columns_with_its_own_names(site: Path) -> None:
    frame = query_frame(settings_of(site).data_dir, SQL, Bounds(memory_mib=512, timeout_s=60))
    assert frame is not None and frame.height
    check_table(shown_by(site, "sql", SQL, width=80), 80, frame, {}, readable=False)


def test_numbers_read_alike_everywhere(site: Path) -> None:
    """GPU seconds are shown as GPU hours with one decimal and thousands separators; the raw
    CSV keeps the seconds."""
    frame = report(settings_of(site), "jobs_by_status")
    total = frame.filter((pl.col("vc") == ALL_VCS) & (pl.col("cluster") == "gen"))["gpu_s"].sum()
    text = shown_by(site, "report", "jobs_by_status", "--cluster", "gen", width=160)
    assert "GPU hours" in text and "gpu_s" not in text
    hours = [float(row[4].replace(",", "")) for row in _table(text)[1] if row[0] == ALL_VCS]
    assert sum(hours) == pytest.approx(total / 3600, abs=0.05 * len(hours))
    raw = shown_by(site, "report", "jobs_by_status", "--format", "csv", width=80)
    assert raw.startswith("cluster,vc,state,jobs,jobs_pct,gpu_s,gpu_time_pct\n")


def test_a_roll_up_row_that_repeats_its_only_member_is_left_out() -> None:
    """Cluster a has one VC, '(none)' (no scheduler names one): its '(all)' row would repeat
    it. Cluster b has two VCs on one GPU model: every VC's '(all)' model row repeats its model
    row, the VC roll-up stays."""
    df = pl.DataFrame(
        {
            "cluster": ["a", "a", "b", "b", "b", "b", "b", "b"],
            "vc": ["(all)", "(none)", "(all)", "(all)", "x", "x", "y", "y"],
            "gpu_model": ["(all)", "(all)", "(all)", "A100", "(all)", "A100", "(all)", "A100"],
            "gpu_h": [1.0, 1.0, 5.0, 5.0, 2.0, 2.0, 3.0, 3.0],
        }
    )
    kept = single_member_rollups(df, ROLLUP_COLUMNS)
    assert kept.select("cluster", "vc", "gpu_model").rows() == [
        ("a", "(none)", "(all)"),
        ("b", "(all)", "A100"),
        ("b", "x", "A100"),
        ("b", "y", "A100"),
    ]


@pytest.mark.parametrize(
    ("value", "unit", "shown"),
    [
        (462500.0, "GPU h", "462,500.0"),
        (4.625e-07, "%", "0.0"),
        (-0.0001, "GPU h", "0.0"),
        (1234567, "count", "1,234,567"),
        (2.5, "money", "2.50"),
        (1e20, "number", "100,000,000,000,000,000,000.00"),
        (True, "", "yes"),
    ],
)
def test_one_number_format_per_unit(value: float, unit: str, shown: str) -> None:
    assert number(value, unit) == shown


def test_gpu_counts_read_as_counts(site: Path) -> None:
    """A wait's GPUs, its most GPUs on one host and its VC's quota are whole counts ("8", not
    "8.00"); a column with a MIG slice's share (0.4 GPU) shows one decimal throughout, so that
    the slice never reads as 0. The CSV keeps the stored values."""
    frame = pl.DataFrame({"vc_quota": [8.0, None, 64.0], "per_host": [1.0, 0.4, 2.0]})
    assert _cells(frame["vc_quota"], column("vc_quota")) == ["8", "", "64"]
    assert _cells(frame["per_host"], column("per_host")) == ["1.0", "0.4", "2.0"]
    headers, body, _ = _table(shown_by(site, "report", "queue_causes", width=1000))
    for title in ("GPUs", "Most GPUs on one host"):
        cells = {row[headers.index(title)] for row in body}
        assert cells and (all(c.isdigit() for c in cells) or all("." in c for c in cells)), cells
    raw = shown_by(site, "report", "queue_causes", "--format", "csv", width=80).splitlines()
    per_host = raw[0].split(",").index("per_host")
    assert {line.split(",")[per_host] for line in raw[1:]} >= {"1.0"}


def test_a_long_table_lists_what_says_something_first() -> None:
    """Rows by GPU hours kept waiting, most first; those under 0.05 GPU h (0.0 as shown) are
    counted in a note, unless every row is: an empty table would say nothing."""
    df = pl.DataFrame(
        {"job_id": ["a", "b", "c", "d"], "blocked_gpu_s": [0.0, 179.0, 7200.0, 180.0]}
    )
    shown, notes = most_first(df, "blocked_gpu_s")
    assert shown["job_id"].to_list() == ["c", "d"]  # 180 s = 0.05 h reads 0.1
    assert notes == [
        "2 rows whose GPU hours kept waiting is under 0.05 (shown as 0.0) left out, so that the "
        "2 that say something come first (--format csv lists every row)."
    ]
    shown, notes = most_first(df.head(2), "blocked_gpu_s")
    assert shown["job_id"].to_list() == ["b", "a"] and notes == []


def test_queue_idle_overlap_lists_the_waits_kept_waiting_most_first(site: Path) -> None:
    """`report queue_idle_overlap` in the terminal: no row reads 0.0 GPU hours kept waiting when
    some does not, the largest first; the CSV keeps every row."""
    frame = report(settings_of(site), "queue_idle_overlap")
    hours = frame["blocked_gpu_s"] / 3600
    assert (hours >= 0.05).sum() > 1 and (hours < 0.05).sum() > 0, "the site checks nothing"
    headers, body, under = _table(shown_by(site, "report", "queue_idle_overlap", width=1000))
    kept = [float(row[headers.index("GPU hours kept waiting")]) for row in body]
    assert kept == sorted(kept, reverse=True) and min(kept) >= 0.1, kept
    assert f"{(hours < 0.05).sum():,} rows whose GPU hours kept waiting is under 0.05" in under
    csv = shown_by(site, "report", "queue_idle_overlap", "--format", "csv", width=80)
    assert len(csv.splitlines()) == frame.height + 1


def test_file_sizes_read_alike() -> None:
    sizes = (5, 654_000, 561_512_141, 5 * 1024**3)
    assert [byte_size(n) for n in sizes] == ["5 B", "638.7 KiB", "535.5 MiB", "5.0 GiB"]


@pytest.mark.parametrize(
    ("name", "kept"),
    [
        ("queue_causes", {"Cause", "Waiting (min)"}),
        ("failure_attempts", {"Why"}),
        ("idle_slots", {"Duration (h)"}),
        ("waste_by_vc", {"Idle slots (% of own GPU time)", "Never-used GPUs (% of own GPU time)"}),
    ],
)
def test_80_columns_keep_what_a_row_is_about(site: Path, name: str, kept: set[str]) -> None:
    """What the table is for stays at 80 columns: a wait's cause and length, a failure's
    reason, an idle slot's length (put back in the room a wider column left out made), the
    shares of waste."""
    headers = _table(shown_by(site, "report", name, width=80))[0]
    assert kept <= set(headers), headers


def test_codes_read_as_words(site: Path) -> None:
    """Codes (kinds, metrics, causes, diagnoses) reach the terminal as words, never snake_case."""
    for name, code in (
        ("spatial_summary", "Metric"),
        ("waste_by_vc", "Kind"),
        ("job_usage", "Diagnoses"),
        ("queue_causes", "Cause"),
    ):
        headers, body, _ = _table(shown_by(site, "report", name, width=1000))
        cells = [row[headers.index(code)] for row in body]
        assert any(cells) and not [c for c in cells if "_" in c], (name, cells)
    assert "Mean of jobs' CPU utilization (unweighted)" in _cells(
        pl.Series(["mean_cpu_util"]), column("metric")
    )
    assert _cells(pl.Series(["improper_batch_size,non_dl_job", None]), column("diagnoses")) == [
        "improper batch size, non dl job",
        "",
    ]


def test_titles_say_the_unit_and_the_rule_in_words(site: Path) -> None:
    assert "Queueing delay, minutes" in shown_by(site, "report", "queueing_delay", width=160)
    assert "GPU hours lost per VC, most first" in shown_by(site, "report", "--by", "vc", width=160)
    replay = shown_by(site, "policy", "replay", "--idle-hours", "1", width=160)
    assert "Replay of the cancel rule (every job)" in replay, replay
    minutes = report(settings_of(site), "job_util_hist")["gpu_minutes"]
    shown = shown_by(site, "report", "job_util_hist", width=160)
    assert "GPU minutes" in shown and f"{minutes[0]:,.1f}" in shown


def test_no_rows_is_one_sentence() -> None:
    out = io.StringIO()
    render(pl.DataFrame({"gpu_s": []}, schema={"gpu_s": pl.Float64}), title="Idle slots", out=out)
    assert out.getvalue() == "No rows in 'Idle slots'.\n"


def test_a_column_left_out_goes_back_when_it_fits() -> None:
    """A narrow DETAIL column left out first goes back in the room a wide FIGURE column left
    out later made; the most useful goes back first."""
    specs = [
        Column("k", rank=Rank.KEY),
        Column("narrow", rank=Rank.DETAIL),
        Column("wide", rank=Rank.FIGURE),
        Column("headline", rank=Rank.HEADLINE),
    ]
    widths = [10, 5, 40, 10]  # each takes 3 more, the table 1
    assert _fit(specs, widths, 50) == ([0, 1, 3], [2])
    assert _fit(specs, widths, 34) == ([0, 3], [1, 2])
