"""Slurm requeues (`sacct --duplicates`): a requeued job's runs, printed under one JobID, become
attempts, each with its own interval, hosts and state; its failed earlier runs are failed
attempts with the scheduler's reason, its waits between runs are waits, and re-reading the file
duplicates nothing. The capture (tests/fixtures/sacct/requeue_duplicates_P_written.txt) is
written from Slurm's own test of `sacct -D` after a requeue, not captured (fixtures README)."""

from __future__ import annotations

import re
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import polars as pl
import pytest

from gpuwaste.analyses.run import analyze
from gpuwaste.config import ClusterConfig, LogsSource, Settings, SlurmSource
from gpuwaste.ingest.gpu_indices import fill_unknown_gpus
from gpuwaste.ingest.logs.parse import log_name
from gpuwaste.ingest.logs.source import ingest_logs, renamed_attempts
from gpuwaste.ingest.slurm.parse import parse_sacct
from gpuwaste.ingest.slurm.source import ingest_slurm
from gpuwaste.warehouse.schema import UTC_TS as ts_dtype
from gpuwaste.warehouse.store import Warehouse
from tests.conftest import REPO

CAPTURE = REPO / "tests" / "fixtures" / "sacct" / "requeue_duplicates_P_written.txt"
NOW = datetime(2026, 11, 3, tzinfo=UTC)


def _t(hhmm: str) -> datetime:
    return datetime.fromisoformat(f"2026-11-02T{hhmm}:00+00:00")


TS = [_t("08:00") + timedelta(minutes=5 * i) for i in range(49)]


def write_samples(wh: Warehouse) -> None:
    """Telemetry of every GPU (4 on gpu01-03, 1 on gpu04) every 5 minutes from 08:00 to 12:00:
    each run holds whole hosts, so each attempt is tied to its own host's GPUs."""
    rows = [
        (host, gpu, t, 50.0)
        for host, n in (("gpu01", 4), ("gpu02", 4), ("gpu03", 4), ("gpu04", 1))
        for gpu in range(n)
        for t in TS
    ]
    samples = pl.DataFrame(
        rows,
        schema={"host": pl.String(), "gpu": pl.Int16(), "ts": ts_dtype, "util": pl.Float64()},
        orient="row",
    )
    wh.replace_window("gpu_samples", "c", TS[0], TS[-1] + timedelta(minutes=5), samples, source="t")


@pytest.fixture(scope="module")
def requeued(tmp_path_factory: pytest.TempPathFactory) -> tuple[Settings, dict[str, int]]:
    root = tmp_path_factory.mktemp("requeue")
    shutil.copy(CAPTURE, root / "sacct.txt")
    s = Settings(
        data_dir=root / "wh",
        clusters=[ClusterConfig(name="c", slurm=SlurmSource(file=root / "sacct.txt"))],
    )
    write_samples(Warehouse(s.data_dir))
    ingest_slurm(s, s.clusters[0], now=NOW)
    again = ingest_slurm(s, s.clusters[0], now=NOW)  # re-reading the file: nothing doubles
    analyze(s, quiet=True)
    return s, again.written


def test_the_parser_gives_each_run_and_the_job_its_last_run() -> None:
    parsed = parse_sacct(CAPTURE.read_text())
    assert not parsed.refused and parsed.accepted == 12
    job = parsed.jobs.filter(pl.col("job_id") == "4242").row(0, named=True)
    # the last run, with the first run's Submit (Slurm resets Submit at a requeue)
    assert (job["raw_state"], job["submit_ts"], job["start_ts"]) == (
        "COMPLETED",
        _t("08:00"),
        _t("10:30"),
    )
    runs = parsed.attempts.sort("job_id", "attempt")
    assert runs.select("job_id", "attempt", "raw_state", "state", "hosts").rows() == [
        ("4242", 0, "NODE_FAIL", "unsuccessful", ["gpu01"]),
        ("4242", 1, "REQUEUED", "killed", ["gpu02"]),
        ("4242", 2, "COMPLETED", "passed", ["gpu03"]),
        ("4244", 0, "PREEMPTED", "killed", ["gpu04"]),
        ("4244", 1, "FAILED", "unsuccessful", ["gpu04"]),
    ]


def test_one_run_printed_twice_is_one_attempt() -> None:
    """Overlapping windows concatenated: the run seen running, then ended, is one run."""
    lines = CAPTURE.read_text().splitlines()
    running = lines[9].replace("|FAILED|1:0|", "|RUNNING|0:0|").replace("2026-11-02T09:10:00", "")
    text = "\n".join([lines[0], running, *lines[1:]]) + "\n"
    runs = parse_sacct(text).attempts.filter(pl.col("job_id") == "4244")
    assert runs.select("attempt", "raw_state").rows() == [(0, "PREEMPTED"), (1, "FAILED")]


def test_each_run_is_an_attempt_in_job_gpus_and_rereading_doubles_nothing(
    requeued: tuple[Settings, dict[str, int]],
) -> None:
    s, again = requeued
    wh = Warehouse(s.data_dir)
    gpus = wh.read("job_gpus", "c").sort("job_id", "attempt")
    got = gpus.group_by("job_id", "attempt", "host", "start_ts", "end_ts").agg(pl.col("gpu").sort())
    assert got.sort("job_id", "attempt").rows() == [
        ("4242", 0, "gpu01", _t("08:05"), _t("09:00"), [0, 1, 2, 3]),
        ("4242", 1, "gpu02", _t("09:20"), _t("10:00"), [0, 1, 2, 3]),
        ("4242", 2, "gpu03", _t("10:30"), _t("12:00"), [0, 1, 2, 3]),
        ("4243", 0, "gpu04", _t("08:02"), _t("08:32"), [0]),
        ("4244", 0, "gpu04", _t("08:12"), _t("08:40"), [0]),
        ("4244", 1, "gpu04", _t("08:50"), _t("09:10"), [0]),
    ]
    assert wh.read("job_attempts", "c").height == 5 and wh.read("jobs", "c").height == 3
    assert again["job_attempts"] == 5  # replaced, not appended


def test_failed_earlier_runs_are_failed_attempts_with_the_schedulers_reason(
    requeued: tuple[Settings, dict[str, int]],
) -> None:
    s, _ = requeued
    df = Warehouse(s.data_dir).read("failure_attempts", "c").sort("job_id", "attempt")
    got = [
        (r["job_id"], r["attempt"], r["raw_state"], r["reason"], r["runtime_s"], r["gpu_s"])
        for r in df.iter_rows(named=True)
    ]
    assert got == [
        ("4242", 0, "NODE_FAIL", "node failure", 3300, 4 * 3300),
        ("4242", 1, "REQUEUED", "requeued", 2400, 4 * 2400),
        ("4243", 0, "FAILED", "no signature", 1800, 1800),
        ("4244", 0, "PREEMPTED", "job preempted", 1680, 1680),
        ("4244", 1, "FAILED", "no signature", 1200, 1200),
    ]
    retries = (
        Warehouse(s.data_dir)
        .read("failure_retries", "c")
        .filter(
            (pl.col("vc") == "(all)")
            & (pl.col("gpu_model") == "(all)")
            & (pl.col("size_class") == "all")
        )
    )
    row = retries.row(0, named=True)
    assert (row["jobs"], row["jobs_retried"], row["retries"], row["failed_attempts"]) == (
        3,
        2,
        3,
        5,
    )


def test_the_waits_between_runs_are_waits(requeued: tuple[Settings, dict[str, int]]) -> None:
    s, _ = requeued
    df = Warehouse(s.data_dir).read("queue_causes", "c").filter(pl.col("job_id") == "4242")
    waits = sorted((r["attempt"], r["wait_start"], r["wait_end"]) for r in df.iter_rows(named=True))
    assert waits == [
        (0, _t("08:00"), _t("08:05")),
        (1, _t("09:00"), _t("09:20")),
        (2, _t("10:00"), _t("10:30")),
    ]
    assert timedelta(minutes=5 + 20 + 30) == sum((b - a for _, a, b in waits), start=timedelta())


def test_runs_read_in_two_windows_stay_one_job_s_attempts(tmp_path: Path) -> None:
    """A configured command reads a window at a time, and `-D` prints only the runs of its
    window: 4242's first two runs in one read, its last run alone in the next."""
    lines = CAPTURE.read_text().splitlines()
    first, second = tmp_path / "w1.txt", tmp_path / "w2.txt"
    first.write_text("\n".join(lines[:5]) + "\n")  # header, runs 0 and 1 of 4242
    second.write_text("\n".join([lines[0], *lines[5:7]]) + "\n")  # its last run
    s = Settings(
        data_dir=tmp_path / "wh",
        clusters=[ClusterConfig(name="c", slurm=SlurmSource(file=first))],
    )
    ingest_slurm(s, s.clusters[0], now=NOW)
    later = s.model_copy(
        update={"clusters": [ClusterConfig(name="c", slurm=SlurmSource(file=second))]}
    )
    for _ in range(2):  # the second window read twice: nothing doubles
        ingest_slurm(later, later.clusters[0], now=NOW)
    wh = Warehouse(s.data_dir)
    runs = wh.read("job_attempts", "c").sort("attempt")
    assert runs.select("attempt", "raw_state").rows() == [
        (0, "NODE_FAIL"),
        (1, "REQUEUED"),
        (2, "COMPLETED"),
    ]
    spans = wh.read("job_gpus", "c").select("attempt", "host", "start_ts").sort("attempt")
    assert spans.rows() == [
        (0, "gpu01", _t("08:05")),
        (1, "gpu02", _t("09:20")),
        (2, "gpu03", _t("10:30")),
    ]
    job = wh.read("jobs", "c").row(0, named=True)
    assert (job["raw_state"], job["submit_ts"]) == ("COMPLETED", _t("08:00"))


def test_telemetry_arriving_after_the_runs_fills_each_attempt_s_gpus(tmp_path: Path) -> None:
    """Slurm first (no samples: one row per host, GPU index unknown, per attempt), telemetry
    after: `fill_unknown_gpus` gives each attempt its own host's GPUs and keeps the attempts."""
    s = Settings(
        data_dir=tmp_path / "wh",
        clusters=[ClusterConfig(name="c", slurm=SlurmSource(file=CAPTURE))],
    )
    ingest_slurm(s, s.clusters[0], now=NOW)
    wh = Warehouse(s.data_dir)
    before = wh.read("job_gpus", "c").filter(pl.col("job_id") == "4242")
    assert before.select("attempt", "host", "gpu").sort("attempt").rows() == [
        (0, "gpu01", -1),
        (1, "gpu02", -1),
        (2, "gpu03", -1),
    ]
    write_samples(wh)
    assert fill_unknown_gpus(wh, "c", TS[0], TS[-1] + timedelta(minutes=5)) == 3
    after = wh.read("job_gpus", "c").group_by("job_id", "attempt", "host").agg(pl.col("gpu").sort())
    assert after.sort("job_id", "attempt").rows() == [
        ("4242", 0, "gpu01", [0, 1, 2, 3]),
        ("4242", 1, "gpu02", [0, 1, 2, 3]),
        ("4242", 2, "gpu03", [0, 1, 2, 3]),
        ("4243", 0, "gpu04", [0]),
        ("4244", 0, "gpu04", [0]),
        ("4244", 1, "gpu04", [0]),
    ]


def test_a_default_named_log_is_the_last_run_s(tmp_path: Path) -> None:
    """Slurm's default `slurm-<id>.out` is one file for all of a requeued job's runs: sbatch's
    `--open-mode` defaults to slurm.conf's JobFileAppend, and "By default, any existing file is
    truncated" (SchedMD/slurm doc/man/man1/sbatch.1, doc/man/man5/slurm.conf.5), so a requeued
    run starts it afresh or, with append, writes after the earlier runs: either way its end, where
    the error is, is the last run's. 4244's log (preempted, then failed) gives its last attempt
    its reason; its first keeps the scheduler's. A warehouse that stored such a log as attempt 0
    is corrected by the next `ingest logs`, a file gone from the folder too."""
    shutil.copy(CAPTURE, tmp_path / "sacct.txt")
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "slurm-4244.out").write_text(
        "epoch 1 step 40\n"
        "slurmstepd: error: *** JOB 4244 ON gpu04 CANCELLED AT 2026-11-02T08:40:00 DUE TO "
        "PREEMPTION ***\n"
        "epoch 1 step 1\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    )
    (logs / "slurm-4243.out").write_text("ModuleNotFoundError: No module named 'apex'\n")
    s = Settings(
        data_dir=tmp_path / "wh",
        clusters=[
            ClusterConfig(
                name="c", slurm=SlurmSource(file=tmp_path / "sacct.txt"), logs=LogsSource(dir=logs)
            )
        ],
    )
    wh = Warehouse(s.data_dir)
    write_samples(wh)
    ingest_slurm(s, s.clusters[0], now=NOW)
    ingest_logs(s, s.clusters[0])
    # as an older gpuwaste stored them: attempt 0 for a name without one
    old = wh.read("job_logs", "c", "logs").with_columns(pl.lit(0, pl.Int16()).alias("attempt"))
    wh.upsert("job_logs", "c", "logs", old.drop("cluster"))
    (logs / "slurm-4243.out").unlink()  # rotated away: its row stays, corrected too
    again = ingest_logs(s, s.clusters[0])
    assert again.note.endswith("1 unchanged, 2 attempts corrected")
    stored = wh.read("job_logs", "c").sort("path")
    assert stored.select("path", "attempt").rows() == [
        ("slurm-4243.out", None),
        ("slurm-4244.out", None),
    ]
    assert ingest_logs(s, s.clusters[0]).written["job_logs"] == 0  # corrected once
    analyze(s, quiet=True)
    df = wh.read("failure_attempts", "c").sort("job_id", "attempt")
    got = [(r["job_id"], r["attempt"], r["reason"], r["origin"]) for r in df.iter_rows(named=True)]
    assert got == [
        ("4242", 0, "node failure", "scheduler"),
        ("4242", 1, "requeued", "scheduler"),
        ("4243", 0, "import error", "log"),
        ("4244", 0, "job preempted", "scheduler"),
        ("4244", 1, "GPU OOM", "log"),
    ]


@pytest.mark.parametrize(
    "pattern",
    [
        LogsSource.model_fields["pattern"].default,
        r"(?P<job>\d+)-run(?P<attempt>\d*)\.log",  # an empty attempt group: none
        r"^job_(?P<job>\d*)\.txt$",  # an empty job: no job
        r"^(?P<job>\d+)\.err$",  # no attempt group
    ],
)
def test_renamed_attempts_over_every_row_is_log_names_rule_per_name(pattern: str) -> None:
    """The stored rows' attempts corrected at once (polars) are those `log_name` gives name by
    name, in folders, compressed, read now or not, and names no pattern takes."""
    names = [
        "slurm-12.out", "slurm-12.3.out", "a/b/slurm-7_2.err", "slurm-9.out.gz", "slurm-9.1.err.gz",
        "x.gz", "77-run.log", "77-run4.log", "sub/77-run4.log.gz", "job_.txt", "job_5.txt",
        "5.err", "notes.md", "slurm-40.out",
    ]  # fmt: skip
    stored = pl.DataFrame(
        {
            "cluster": "c",
            "path": names,
            "attempt": [0, 3, None, 0, 1, 0, None, 2, 4, 0, 0, 1, 0, 0],
        },
        schema_overrides={"attempt": pl.Int16()},
    ).with_columns(pl.lit(None, pl.String()).alias(c) for c in ("job_key", "reason"))
    read = {"slurm-40.out"}
    compiled = re.compile(LogsSource(dir=Path("."), pattern=pattern).pattern)
    want = []
    for r in stored.iter_rows(named=True):
        name = log_name(r["path"].rsplit("/", 1)[-1], compiled)
        if r["path"] not in read and name is not None and name.attempt != r["attempt"]:
            want.append((r["path"], name.attempt))
    got = renamed_attempts(stored, compiled, read)
    assert got.columns == stored.columns
    assert sorted(got.select("path", "attempt").rows(), key=str) == sorted(want, key=str)
    assert want  # each pattern corrects some row


def test_a_pattern_polars_cannot_match_is_refused_naming_why() -> None:
    with pytest.raises(ValueError, match="look-around, backreferences"):
        LogsSource(dir=Path("."), pattern=r"^slurm-(?P<job>\d+)(?=\.out)")
