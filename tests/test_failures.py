"""Failures [Philly §4.2, Table 7]: the reason of each failed attempt (scheduler, then job logs),
the job logs source, the signature rules, and the failure tables.

Hand-computed cases (the scheduler's states one by one; a three-attempt job), the generator's
planted failures (`gpuwaste generate --logs`: every reason of Table 7, the truth written by hand
from each job's state and planted error), and the logs source's edges: a 2 GiB log read in
bounded memory, bytes that are not UTF-8, no newline at the end, incremental re-reads.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pytest
from typer.testing import CliRunner

from gpuwaste.analyses.registry import BY_NAME
from gpuwaste.analyses.run import analyze
from gpuwaste.cli import app
from gpuwaste.config import (
    ClusterConfig,
    ConfigError,
    FailureSettings,
    LogsSource,
    Settings,
    SlurmSource,
    parse_settings,
)
from gpuwaste.dashboard import queries
from gpuwaste.dashboard.filters import Filters
from gpuwaste.generate import GeneratorSpec, write_all
from gpuwaste.generate.failure_logs import LOG_ERRORS, PLANTED
from gpuwaste.ingest.logs.rules import match_text, rule_set, shipped_rules
from gpuwaste.ingest.logs.source import ingest_logs
from gpuwaste.ingest.slurm.source import ingest_slurm
from gpuwaste.warehouse.readonly import read_only_connection
from gpuwaste.warehouse.results import ALL_MODELS
from gpuwaste.warehouse.store import Warehouse
from tests.conftest import REPO

T0 = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
TABLE_7 = (
    "CPU OOM", "incorrect inputs", "semantic error", "core dump", "invalid memory access",
    "model checkpoint error", "CUDA failure", "syntax error", "traceback from crash", "MPI error",
    "GPU OOM", "MPI runtime failure", "permission error", "import error", "job preempted",
    "CUDA init failed", "model diverged", "CUDA version mismatch", "GPU ECC error",
    "output node error", "cannot load libraries",
)  # fmt: skip


def _attempts(data_dir: Path, cluster: str = "c") -> dict[str, dict[str, object]]:
    """failure_attempts by job id (one attempt per job)."""
    df = Warehouse(data_dir).read("failure_attempts", cluster)
    return {r["job_id"]: r for r in df.iter_rows(named=True)}


# ------------------------------------------------------------------------------------ rules


def test_the_shipped_rules_cover_table_7_and_each_planted_error_gets_its_reason() -> None:
    rules = rule_set(FailureSettings())
    assert set(TABLE_7) <= {r.reason for r in shipped_rules()}
    assert set(LOG_ERRORS) == set(TABLE_7)
    for reason, lines in LOG_ERRORS.items():
        text = "\n".join(["epoch 1 loss 2.3", *lines]).format(job="7", user="u", host="h1")
        found = match_text(text, rules)
        assert found is not None and found.reason == reason, (reason, found)
    assert match_text("epoch 1 loss 2.3\nepoch 2 loss 1.9\n", rules) is None
    # today's Slurm (task_cgroup_memory.c) words the CPU OOM line differently
    newer = (
        "slurmstepd: error: Detected 2 oom-kill event(s) in StepId=7.0. Some of your processes "
        "may have been killed by the cgroup out-of-memory handler."
    )
    found = match_text(newer, rules)
    assert found is not None and found.reason == "CPU OOM"


def test_a_root_cause_outranks_an_implicit_traceback_and_the_last_line_is_kept() -> None:
    rules = rule_set(FailureSettings())
    text = "Traceback (most recent call last):\n  File x\nRuntimeError: boom\n"
    found = match_text(text, rules)
    assert found is not None and found.reason == "traceback from crash" and found.implicit
    text += "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB\nmore\n"
    found = match_text(text, rules)
    assert found is not None and (found.reason, found.line_no) == ("GPU OOM", 4)
    assert found.line == "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB"


# Real lines: PyTorch's DistBackendError as users posted it (hkproj/pytorch-transformer-distributed
# issue #1; NVIDIA/nccl issue #1231), NCCL's INFO/WARN lines of runs that were not failing
# (NVIDIA/nccl-tests issue #188: "NET/Plugin : Plugin load ... No such file or directory",
# called harmless by NCCL's maintainer in NVIDIA/nccl #1231; NVIDIA/nccl issue #766: "NCCL WARN
# Failed to open libibverbs.so[.1]" in a training that ran, only slowly).
DIST_BACKEND_ERROR = (
    "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
    "ProcessGroupNCCL.cpp:1333, unhandled system error (run with NCCL_DEBUG=INFO for details), "
    "NCCL version 2.18.6\n"
    "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or "
    "device error. \n"
    "Last error:\n"
    "socketStartConnect: Connect to 192.168.19.14<52822> failed : No route to host\n"
)
NCCL_PLUGIN_INFO = (
    "user:852750:852750 [0] NCCL INFO NET/Plugin : Plugin load (libnccl-net.so) returned 2 : "
    "libnccl-net.so: cannot open shared object file: No such file or directory"
)
NCCL_WARN = (
    "cvlab189-System-Product-Name:1379562:1379562 [0] misc/ibvwrap.cc:63 NCCL WARN Failed to "
    "open libibverbs.so[.1]"
)
TYPE_ERROR = (
    "Traceback (most recent call last):\n"
    '  File "/home/u/train.py", line 88, in <module>\n'
    "    loss = criterion(out, target, 0.1)\n"
    "TypeError: forward() takes 3 positional arguments but 4 were given\n"
)


def test_a_torch_nccl_error_is_an_mpi_error_not_the_plugin_info_before_it() -> None:
    """DistBackendError is an MPI error [Philly §4.2 counts NCCL's with MPI's]; the last line of
    the rule is kept. NCCL's harmless INFO line about its network plugin (`.so: cannot open
    shared object file`) is not "cannot load libraries", which ranks before MPI errors."""
    rules = rule_set(FailureSettings())
    found = match_text("step 1\n" + DIST_BACKEND_ERROR, rules)
    assert found is not None and (found.reason, found.line_no) == ("MPI error", 3)
    assert found.line.startswith("ncclSystemError: System call")
    # NVIDIA/nccl #1231's log: the plugin INFO line at start-up, then torch's error
    text = (
        f"{NCCL_PLUGIN_INFO}\n"
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
        "ProcessGroupNCCL.cpp:1691, unhandled cuda error (run with NCCL_DEBUG=INFO for details), "
        "NCCL version 2.19.3\n"
        "ncclUnhandledCudaError: Call to CUDA function failed.\n"
        "Last error:\n"
        "Cuda failure 802 'system not yet initialized'\n"
    )
    found = match_text(text, rules)
    assert found is not None and found.reason == "MPI error"
    assert found.line == "ncclUnhandledCudaError: Call to CUDA function failed."
    assert match_text(NCCL_PLUGIN_INFO, rules) is None
    # a library really missing still is
    missing = "ImportError: libcudart.so.11.0: cannot open shared object file: No such file"
    found = match_text(missing, rules)
    assert found is not None and found.reason == "cannot load libraries"


def test_an_early_harmless_no_such_file_does_not_outrank_the_final_type_error() -> None:
    """A bare "No such file or directory" early in a run (a profile script the job's shell
    sources, in bash's own format, written here; NCCL's plugin INFO line, real) is not the
    incorrect input that ended it: the final `TypeError` is (semantic error). Nor is NCCL's
    WARN of a healthy run an MPI error. A missing script or input still is an incorrect input."""
    rules = rule_set(FailureSettings())
    early = (
        "/var/spool/slurmd/job4711/slurm_script: line 5: /etc/profile.d/lmod.sh: No such file or "
        f"directory\n{NCCL_PLUGIN_INFO}\n{NCCL_WARN}\nepoch 1 step 10 loss 2.31\n"
    )
    found = match_text(early + TYPE_ERROR, rules)
    assert found is not None and (found.reason, found.line_no) == ("semantic error", 8)
    assert found.line == "TypeError: forward() takes 3 positional arguments but 4 were given"
    assert match_text(early, rules) is None  # a healthy run's log: no signature
    for line in (
        "python3: can't open file '/home/u/train.py': [Errno 2] No such file or directory",
        "FileNotFoundError: [Errno 2] No such file or directory: '/data/train.csv'",
    ):
        found = match_text(early + line, rules)
        assert found is not None and found.reason == "incorrect inputs", line


def test_configured_rules_come_first_and_the_defaults_can_be_dropped() -> None:
    mine = {"regex": "CUDA out of memory", "reason": "batch too large", "sources": ["U"]}
    s = parse_settings({"failures": {"rules": [mine]}})
    found = match_text("CUDA out of memory. Tried to allocate", rule_set(s.failures))
    assert found is not None and found.reason == "batch too large"
    alone = parse_settings({"failures": {"rules": [mine], "default_rules": False}})
    assert match_text("Segmentation fault (core dumped)", rule_set(alone.failures)) is None
    assert rule_set(s.failures).digest != rule_set(alone.failures).digest


def test_a_rule_with_a_bad_regex_is_refused_naming_the_rule() -> None:
    bad = {"regex": "NCCL error (in", "reason": "my NCCL rule", "sources": ["IF"]}
    with pytest.raises(ConfigError) as err:
        parse_settings({"failures": {"rules": [{"regex": "x", "reason": "ok"}, bad]}}, "g.toml")
    msg = str(err.value)
    assert "g.toml" in msg and "failures.rules.1" in msg and "'my NCCL rule'" in msg
    assert "not a regular expression" in msg and msg.count(".") >= 1 and "\n" not in msg
    # one sentence that ends with the regex, no ", got dict" about the table that held it
    assert msg.endswith("unterminated subpattern at position 11): 'NCCL error (in'."), msg
    with pytest.raises(ConfigError, match="sources"):
        parse_settings({"failures": {"rules": [{"regex": "x", "reason": "r", "sources": ["X"]}]}})


def test_the_bad_regex_sentence_docs_ingest_files_shows_is_the_one_given() -> None:
    doc = (Path(__file__).parents[1] / "docs" / "ingest-files.md").read_text(encoding="utf-8")
    shown = " ".join(doc.split("in one sentence naming it: `", 1)[1].split("`", 1)[0].split())
    bad = {"regex": "NCCL error (in", "reason": "MPI error"}
    with pytest.raises(ConfigError) as err:
        parse_settings({"failures": {"rules": [bad]}}, "gpuwaste.toml")
    assert str(err.value) == shown


# ---------------------------------------------------------------- the scheduler, by hand

SACCT = """JobID|JobIDRaw|User|Account|State|ExitCode|Submit|Start|End|AllocTRES|NodeList
1|1|ann|v|NODE_FAIL|0:0|{s}|{a}|{e}|gres/gpu=1|n1
2|2|ann|v|BOOT_FAIL|0:0|{s}|{a}|{e}|gres/gpu=1|n1
3|3|bob|v|OUT_OF_MEMORY|0:125|{s}|{a}|{e}|gres/gpu=2|n1
4|4|bob|v|TIMEOUT|0:0|{s}|{a}|{e}|gres/gpu=8|n1
5|5|bob|v|PREEMPTED|0:0|{s}|{a}|{e}|gres/gpu=1|n1
6|6|cy|w|FAILED|1:0|{s}|{a}|{e}|gres/gpu=1|n1
7|7|cy|w|FAILED|0:11|{s}|{a}|{e}|gres/gpu=1|n1
8|8|cy|w|FAILED|0:9|{s}|{a}|{e}|gres/gpu=1|n1
9|9|cy|w|CANCELLED by 0|0:15|{s}|{a}|{e}|gres/gpu=1|n1
10|10|cy|w|CANCELLED by 1001|0:15|{s}|{a}|{e}|gres/gpu=1|n1
11|11|cy|w|CANCELLED by 990|0:15|{s}|{a}|{e}|gres/gpu=1|n1
12|12|cy|w|COMPLETED|0:0|{s}|{a}|{e}|gres/gpu=1|n1
13|13|cy|w|FAILED|1:0|{s}|{a}|{e}|gres/gpu=4|n1
20_3|21|dan|w|FAILED|1:0|{s}|{a}|{e}|gres/gpu=1|n1
22|22|dan|w|DEADLINE|0:0|{s}|{a}|{e}|gres/gpu=1|n1
23|23|eve|w|FAILED|139:0|{s}|{a}|{e}|gres/gpu=1|n1
24|24|eve|w|FAILED|134:0|{s}|{a}|{e}|gres/gpu=1|n1
25|25|eve|w|FAILED|137:0|{s}|{a}|{e}|gres/gpu=1|n1
26|26|eve|w|FAILED|255:0|{s}|{a}|{e}|gres/gpu=1|n1
27|27|eve|w|FAILED|128:0|{s}|{a}|{e}|gres/gpu=1|n1
28|28|eve|w|FAILED|193:0|{s}|{a}|{e}|gres/gpu=1|n1
29|29|eve|w|FAILED|139:0|{s}|{a}|{e}|gres/gpu=1|n1
"""


@pytest.fixture(scope="module")
def by_hand(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("failures-by-hand")
    start, end = T0, T0 + timedelta(minutes=30)
    (root / "sacct.txt").write_text(
        SACCT.format(s=(T0 - timedelta(minutes=5)).isoformat()[:19], a=start.isoformat()[:19],
                     e=end.isoformat()[:19])
    )  # fmt: skip
    logs = root / "logs"
    logs.mkdir()
    # job 6 (FAILED 1:0): its error on stderr; job 4 (TIMEOUT): the scheduler outranks its log;
    # array task 20_3 (JobIDRaw 21) by Slurm's default name
    (logs / "slurm-6.out").write_text("epoch 1 loss 2.1\n")
    (logs / "slurm-6.err").write_text(
        "Traceback (most recent call last):\nModuleNotFoundError: No module named 'apex'\n"
    )
    (logs / "slurm-4.out").write_text("ImportError: cannot import name 'x'\n")
    (logs / "slurm-20_3.out").write_text("RuntimeError: CUDA error: an illegal memory access\n")
    # job 29 (FAILED 139:0): its log outranks its exit code
    (logs / "slurm-29.out").write_text("torch.OutOfMemoryError: CUDA out of memory.\n")
    settings = Settings(
        data_dir=root / "wh",
        clusters=[
            ClusterConfig(
                name="c", slurm=SlurmSource(file=root / "sacct.txt"), logs=LogsSource(dir=logs)
            )
        ],
        failures=FailureSettings(admin_uids=[0, 990]),
    )
    ingest_slurm(settings, settings.clusters[0], now=T0 + timedelta(days=1))
    ingest_logs(settings, settings.clusters[0])
    analyze(settings, quiet=True)
    return settings.data_dir


def test_the_scheduler_gives_the_reason_first_then_the_log_then_the_signal(by_hand: Path) -> None:
    got = {j: (r["reason"], r["origin"], r["sources"]) for j, r in _attempts(by_hand).items()}
    assert got == {
        "1": ("node failure", "scheduler", "IF"),
        "2": ("node boot failure", "scheduler", "IF"),
        "3": ("CPU OOM", "scheduler", "U"),
        "4": ("time limit", "scheduler", "U"),  # its log's ImportError is outranked
        "5": ("job preempted", "scheduler", "IF"),
        "6": ("import error", "log", "U"),  # from slurm-6.err
        "7": ("core dump", "exit status", "AE,U"),  # SIGSEGV
        "8": ("killed by a signal", "exit status", None),  # SIGKILL
        "9": ("cancelled by admin", "scheduler", "IF"),  # root
        "10": ("cancelled by user", "scheduler", "U"),
        "11": ("cancelled by admin", "scheduler", "IF"),  # in admin_uids
        "13": ("no signature", "none", None),  # FAILED 1:0, no log
        "21": ("invalid memory access", "log", "U"),  # slurm-20_3.out
        "22": ("deadline", "scheduler", "U"),
        # the script's exit code 128 + N: a command it ran killed by signal N (bash's status)
        "23": ("core dump", "exit status", "AE,U"),  # 139 = 128 + SIGSEGV
        "24": ("core dump", "exit status", "AE,U"),  # 134 = 128 + SIGABRT
        "25": ("killed by a signal", "exit status", None),  # 137 = 128 + SIGKILL
        "26": ("no signature", "none", None),  # 255 (`exit -1`): no signal
        "27": ("no signature", "none", None),  # 128: no signal 0
        "28": ("no signature", "none", None),  # 193 = 128 + 65: past the last signal, 64
        "29": ("GPU OOM", "log", "U"),  # 139:0, but slurm-29.out says why
    }  # job 12 COMPLETED: no failed attempt
    row = _attempts(by_hand)["6"]
    assert (row["log_path"], row["line_no"], row["exit_code"], row["exit_signal"]) == (
        "slurm-6.err",
        2,
        1,
        0,
    )
    assert row["line"] == "ModuleNotFoundError: No module named 'apex'"
    assert row["runtime_s"] == 1800 and row["gpu_s"] == 1800


def test_table_7_figures_by_hand(by_hand: Path) -> None:
    df = Warehouse(by_hand).read("failure_reasons", "c")
    every = df.filter((pl.col("vc") == "(all)") & (pl.col("gpu_model") == "(all)"))
    rows = {r["reason"]: r for r in every.iter_rows(named=True)}
    total = rows["all"]
    assert (total["trials"], total["jobs"], total["users"]) == (21, 21, 5)
    # GPUs: 1,1,2,8,1,1,1,1,1,1,1,4,1,1 and jobs 23-29 1 each: demand 1 -> 18, 2-4 -> 2, >4 -> 1
    assert (total["trials_1gpu"], total["trials_2_4gpu"], total["trials_gt4gpu"]) == (18, 2, 1)
    assert total["gpu_h"] == pytest.approx(32 * 0.5)
    assert total["rtf_p50_s"] == 1800
    admin = rows["cancelled by admin"]
    assert (admin["trials"], admin["users"], admin["sources"]) == (2, 1, "IF")
    assert admin["rtf_pct"] == pytest.approx(100 * 2 / 21)
    assert admin["rtf_x_demand_pct"] == pytest.approx(100 * 2 / 32)
    assert rows["time limit"]["rtf_x_demand_pct"] == pytest.approx(100 * 8 / 32)
    # jobs 7, 23, 24; 8, 25; 13, 26, 27, 28
    assert (rows["core dump"]["trials"], rows["core dump"]["users"]) == (3, 2)
    assert rows["killed by a signal"]["trials"] == 2 and rows["no signature"]["trials"] == 4
    assert sum(r["trials"] for k, r in rows.items() if k != "all") == 21


def test_report_lists_the_reasons_by_trials_and_all_last(by_hand: Path) -> None:
    """`report failure_reasons`: most trials first (ties by name), the 'all' row last, not
    where a case-sensitive sort of the names puts it (after the capitals, before 'cancelled')."""
    out = CliRunner().invoke(
        app, ["report", "failure_reasons", "--data-dir", str(by_hand), "--format", "json"]
    )
    assert out.exit_code == 0, out.output
    rows = [r for r in json.loads(out.stdout) if r["vc"] == "(all)"]
    reasons = [r["reason"] for r in rows]
    assert reasons[-1] == "all" and reasons.count("all") == 1
    trials = [r["trials"] for r in rows[:-1]]
    assert trials == sorted(trials, reverse=True) and trials[:4] == [4, 3, 2, 2]
    # 4, 3 and 2 trials, then 1 each by name, whatever its case
    assert reasons[:6] == [
        "no signature", "core dump", "cancelled by admin", "killed by a signal",
        "cancelled by user", "CPU OOM",
    ]  # fmt: skip
    # the dashboard lists them in the same order (one order, warehouse/results.py's)
    con = read_only_connection(by_hand)
    try:
        shown = queries.summary(con, Filters(cluster="c"), "failure_reasons")
    finally:
        con.close()
    assert shown.filter(pl.col("gpu_model") == ALL_MODELS)["reason"].to_list() == reasons


# ------------------------------------------------------------ attempts and retries (Philly)


@pytest.fixture(scope="module")
def retried(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """r1: 3 attempts of 2 GPUs (two retried, the last Failed); r2: 2 attempts (one retried,
    then passed); r3: 1 attempt, Killed; r4: passed at once. As the Philly trace gives them."""
    data_dir = tmp_path_factory.mktemp("retries")
    wh = Warehouse(data_dir)
    ids = ["r1", "r2", "r3", "r4"]
    wh.upsert("jobs", "c", "philly", pl.DataFrame({
        "job_id": ids, "user": ["u1", "u1", "u2", "u2"], "vc": ["v"] * 4,
        "state": ["unsuccessful", "passed", "killed", "passed"],
        "raw_state": ["Failed", "Pass", "Killed", "Pass"],
        "submit_ts": [T0] * 4, "start_ts": [T0] * 4, "end_ts": [T0 + timedelta(hours=3)] * 4,
        "gpus": [2, 1, 1, 1],
    }))  # fmt: skip
    rows = []
    for job, n, gpus in (("r1", 3, 2), ("r2", 2, 1), ("r3", 1, 1), ("r4", 1, 1)):
        for a in range(n):
            for g in range(gpus):
                rows.append({
                    "job_id": job, "attempt": a, "host": "m1", "gpu": g,
                    "start_ts": T0 + timedelta(hours=a), "end_ts": T0 + timedelta(hours=a, minutes=10 * (a + 1)),
                })  # fmt: skip
    wh.upsert("job_gpus", "c", "philly", pl.DataFrame(rows))
    analyze(Settings(data_dir=data_dir, clusters=[ClusterConfig(name="c")]), quiet=True)
    return data_dir


def test_retried_attempts_are_failed_attempts_without_a_log(retried: Path) -> None:
    df = Warehouse(retried).read("failure_attempts", "c").sort("job_id", "attempt")
    got = [
        (r["job_id"], r["attempt"], r["reason"], r["runtime_s"], r["gpu_s"])
        for r in df.iter_rows(named=True)
    ]
    assert got == [
        ("r1", 0, "no signature", 600, 1200), ("r1", 1, "no signature", 1200, 2400),
        ("r1", 2, "no signature", 1800, 3600), ("r2", 0, "no signature", 600, 600),
        ("r3", 0, "cancelled", 600, 600),
    ]  # fmt: skip
    reasons = Warehouse(retried).read("failure_reasons", "c")
    ns = reasons.filter(
        (pl.col("vc") == "(all)")
        & (pl.col("gpu_model") == "(all)")
        & (pl.col("reason") == "no signature")
    ).row(0, named=True)
    assert (ns["trials"], ns["jobs"], ns["users"]) == (4, 2, 1)
    assert (ns["per_job"], ns["per_user"]) == (2.0, 4.0)
    assert ns["rtf_p50_s"] == pytest.approx(900)  # of 600, 600, 1200, 1800


def test_repetition_on_the_all_row_counts_distinct_job_and_user_reason_pairs() -> None:
    """Job a failed twice for two reasons, b and c once for X (vc v); d once for Y in vc w, by
    u1 as a: the 'all' row's repetitions are trials / distinct (job, reason) and (user,
    reason) pairs within its cell, not trials / jobs or users."""
    attempts = pl.DataFrame({
        "cluster": ["c"] * 5, "vc": ["v", "v", "v", "v", "w"], "gpu_model": ["m"] * 5,
        "job_id": ["a", "a", "b", "c", "d"], "user": ["u1", "u1", "u1", "u2", "u1"],
        "reason": ["X", "Y", "X", "X", "Y"], "sources": ["U"] * 5,
        "runtime_s": [60] * 5, "gpus": [1] * 5, "gpu_s": [60] * 5,
    })  # fmt: skip
    con = duckdb.connect()
    con.register("failure_attempts", attempts)
    con.execute("set variable cluster = 'c'")
    df = BY_NAME["failure_reasons"].compute(con)
    got = {
        (r["vc"], r["reason"]): (r["trials"], r["jobs"], r["users"], r["per_job"], r["per_user"])
        for r in df.filter(pl.col("gpu_model") == "m").iter_rows(named=True)
    }
    assert got[("v", "all")] == (4, 3, 2, 1.0, 4 / 3)
    assert got[("v", "X")] == (3, 3, 2, 1.0, 1.5)
    assert got[("(all)", "all")] == (5, 4, 2, 1.0, 5 / 3)  # (u1, Y) in v and w: one pair
    assert got[("(all)", "Y")] == (2, 2, 1, 1.0, 2.0)


def test_retries_by_job_size(retried: Path) -> None:
    df = Warehouse(retried).read("failure_retries", "c")
    df = df.filter((pl.col("vc") == "(all)") & (pl.col("gpu_model") == "(all)"))
    rows = {r["size_class"]: r for r in df.iter_rows(named=True)}
    assert (rows["all"]["jobs"], rows["all"]["jobs_retried"], rows["all"]["retries"]) == (4, 2, 3)
    assert rows["all"]["retries_max"] == 2 and rows["all"]["failed_attempts"] == 5
    assert rows["2-4"]["failed_gpu_h"] == pytest.approx((1200 + 2400 + 3600) / 3600)
    assert (rows["1"]["jobs"], rows["1"]["retries"], rows["1"]["failed_attempts"]) == (3, 1, 2)


# -------------------------------------------------------------- planted truth (generator)


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("failures-generated")
    out = root / "gen"
    write_all(GeneratorSpec(seed=3, gpus=32, days=1.0, cluster="g"), out, logs=True)
    settings = Settings(
        data_dir=root / "wh",
        clusters=[
            ClusterConfig(
                name="g",
                slurm=SlurmSource(file=out / "sacct.txt"),
                logs=LogsSource(dir=out / "logs"),
            )
        ],
    )
    ingest_slurm(settings, settings.clusters[0], now=datetime(2026, 12, 1, tzinfo=UTC))
    ingest_logs(settings, settings.clusters[0])
    analyze(settings, quiet=True)
    return out, settings.data_dir


def test_every_planted_failure_gets_its_reason(generated: tuple[Path, Path]) -> None:
    out, data_dir = generated
    truth = json.loads((out / "truth.json").read_text())["failure_logs"]
    want = {t["job_id"]: t["reason"] for t in truth}
    attempts = _attempts(data_dir, "g")
    have = {j: r["reason"] for j, r in attempts.items()}
    assert have == want
    assert set(PLANTED) <= set(want.values())  # every reason of Table 7 and 'no signature'
    # and a script's command killed by a signal (exit code 128 + N, e.g. 134:0), no log to say
    by_code = [
        r for r in attempts.values() if r["origin"] == "exit status" and not r["exit_signal"]
    ]
    assert by_code and all(128 < r["exit_code"] <= 192 for r in by_code)
    lines = {j: r["line"] for j, r in attempts.items() if r["origin"] == "log"}
    assert any("CUDA out of memory. Tried to allocate" in line for line in lines.values())


def test_the_generator_writes_logs_only_with_the_flag(tmp_path: Path) -> None:
    write_all(GeneratorSpec(seed=3, gpus=8, days=0.2, cluster="g"), tmp_path / "a")
    write_all(GeneratorSpec(seed=3, gpus=8, days=0.2, cluster="g"), tmp_path / "b", logs=True)
    assert not (tmp_path / "a" / "logs").exists() and any((tmp_path / "b" / "logs").iterdir())
    for name in ("sacct.txt", "metrics.om", "philly/cluster_job_log"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    a = json.loads((tmp_path / "a" / "truth.json").read_text())
    b = json.loads((tmp_path / "b" / "truth.json").read_text())
    assert b.pop("failure_logs") and a == b


# --------------------------------------------------------------------- the logs source


def _settings(tmp_path: Path, logs: Path, **kw: object) -> Settings:
    return Settings(
        data_dir=tmp_path / "wh",
        clusters=[ClusterConfig(name="c", logs=LogsSource(dir=logs, **kw))],  # type: ignore[arg-type]
    )


def test_invalid_utf8_and_no_newline_at_the_end(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "slurm-5.out").write_bytes(
        b"caf\xe9 \xff\xfe\nstep 3\nRuntimeError: CUDA error: an illegal memory access was encountered"
    )
    s = _settings(tmp_path, logs)
    result = ingest_logs(s, s.clusters[0])
    assert result.accepted == 1 and not result.refused
    row = Warehouse(s.data_dir).read("job_logs", "c").row(0, named=True)
    assert (row["job_key"], row["attempt"], row["reason"], row["line_no"]) == (
        "5",
        None,  # the name gives no attempt
        "invalid memory access",
        3,
    )
    assert row["line"] == "RuntimeError: CUDA error: an illegal memory access was encountered"


def test_incremental_unchanged_files_are_not_read_again_grown_ones_are(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "slurm-1.out").write_text("epoch 1\n")
    (logs / "slurm-2.out").write_text("Segmentation fault (core dumped)\n")
    (logs / "README").write_text("not a log\n")
    s = _settings(tmp_path, logs)
    first = ingest_logs(s, s.clusters[0])
    assert first.written["job_logs"] == 2 and [r.location for r in first.refused] == ["README"]
    table = Warehouse(s.data_dir).read("job_logs", "c").sort("path")
    again = ingest_logs(s, s.clusters[0])
    assert again.written["job_logs"] == 0 and "2 unchanged" in again.note
    assert Warehouse(s.data_dir).read("job_logs", "c").sort("path").equals(table)  # idempotent
    with (logs / "slurm-1.out").open("a") as fh:
        fh.write("ModuleNotFoundError: No module named 'apex'\n")
    grown = ingest_logs(s, s.clusters[0])
    assert grown.written["job_logs"] == 1 and "1 unchanged" in grown.note
    rows = {
        r["path"]: r["reason"]
        for r in Warehouse(s.data_dir).read("job_logs", "c").iter_rows(named=True)
    }
    assert rows == {"slurm-1.out": "import error", "slurm-2.out": "core dump"}
    # other rules: every file is matched again
    s2 = s.model_copy(update={"failures": FailureSettings(default_rules=False)})
    assert ingest_logs(s2, s2.clusters[0]).written["job_logs"] == 2


def test_an_unreadable_log_is_quarantined_and_the_others_are_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The open of one file fails as a file without read permission does (a fault injected at
    `Path.open`: the tests may run as root, who reads anything)."""
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "slurm-1.out").write_text("Segmentation fault (core dumped)\n")
    (logs / "slurm-3.out").write_text("x\n")
    real_open = Path.open

    def open_(self: Path, *args: Any, **kwargs: Any) -> Any:
        if self.name == "slurm-3.out":
            raise PermissionError(13, "Permission denied", str(self))
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", open_)
    s = _settings(tmp_path, logs)
    result = ingest_logs(s, s.clusters[0])
    assert [(r.location, r.reason) for r in result.refused] == [
        ("slurm-3.out", "could not be read: Permission denied")
    ]
    rows = Warehouse(s.data_dir).read("job_logs", "c")
    assert rows["path"].to_list() == ["slurm-1.out"] and rows["reason"][0] == "core dump"


def test_a_custom_pattern_gives_the_attempt(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "job-77-attempt-2.log").write_text("Loss is nan\n")
    s = _settings(tmp_path, logs, pattern=r"^job-(?P<job>\d+)-attempt-(?P<attempt>\d+)\.log$")
    ingest_logs(s, s.clusters[0])
    row = Warehouse(s.data_dir).read("job_logs", "c").row(0, named=True)
    assert (row["job_key"], row["attempt"], row["reason"]) == ("77", 2, "model diverged")
    with pytest.raises(Exception, match="named group `job`"):
        LogsSource(dir=logs, pattern=r"^x-(\d+)$")


def test_a_2_gib_log_is_read_from_its_tail_in_bounded_memory(tmp_path: Path) -> None:
    """A sparse 2 GiB file (nothing on disk but its last line): the child process reads it with
    `[logs] tail_mib` 4 and its peak RSS stays far below the file's size."""
    logs = tmp_path / "logs"
    logs.mkdir()
    big = logs / "slurm-9.out"
    with big.open("wb") as fh:
        fh.truncate(2 << 30)
        fh.seek(2 << 30)
        fh.write(b"\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB\n")
    code = textwrap.dedent(f"""
        import resource
        from pathlib import Path
        from gpuwaste.config import ClusterConfig, LogsSource, Settings
        from gpuwaste.ingest.logs.source import ingest_logs
        s = Settings(data_dir=Path({str(tmp_path / "wh")!r}),
                     clusters=[ClusterConfig(name="c", logs=LogsSource(dir=Path({str(logs)!r})))])
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        ingest_logs(s, s.clusters[0])
        print(before, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    before_kib, after_kib = map(int, done.stdout.split())
    assert after_kib - before_kib < 64 * 1024  # KiB: the 4 MiB tail and its text, not 2 GiB
    row = Warehouse(tmp_path / "wh").read("job_logs", "c").row(0, named=True)
    assert row["reason"] == "GPU OOM" and row["size"] == (2 << 30) + 72


def test_new_logs_alone_refresh_the_failure_tables(tmp_path: Path) -> None:
    """No job changed, only the logs: `analyze` still runs the summaries."""
    root = tmp_path
    (root / "sacct.txt").write_text(
        "JobID|JobIDRaw|User|Account|State|ExitCode|Submit|Start|End|AllocTRES|NodeList\n"
        "5|5|ann|v|FAILED|1:0|2026-11-01T11:00:00|2026-11-01T12:00:00|2026-11-01T12:30:00|gres/gpu=1|n1\n"
    )
    logs = root / "logs"
    logs.mkdir()
    s = Settings(
        data_dir=root / "wh",
        clusters=[
            ClusterConfig(
                name="c", slurm=SlurmSource(file=root / "sacct.txt"), logs=LogsSource(dir=logs)
            )
        ],
    )
    ingest_slurm(s, s.clusters[0], now=T0 + timedelta(days=1))
    analyze(s, quiet=True)
    assert _attempts(s.data_dir)["5"]["reason"] == "no signature"
    (logs / "slurm-5.out").write_text("PermissionError: [Errno 13] Permission denied: '/x'\n")
    ingest_logs(s, s.clusters[0])
    run = analyze(s, quiet=True)[0]
    assert run.jobs_recomputed == 0
    assert _attempts(s.data_dir)["5"]["reason"] == "permission error"
    before = Warehouse(s.data_dir).read("failure_reasons", "c")
    analyze(s, quiet=True)  # idempotent
    assert Warehouse(s.data_dir).read("failure_reasons", "c").equals(before)


def test_ingest_logs_one_off_from_the_command_line(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from gpuwaste.cli import app

    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "slurm-4_2.err").write_text(
        "ImportError: libcudnn.so.8: cannot open shared object file\n"
    )
    wh = str(tmp_path / "wh")
    run = CliRunner().invoke(
        app, ["ingest", "logs", "--dir", str(logs), "--cluster", "c", "--data-dir", wh]
    )
    assert run.exit_code == 0, run.output
    assert (
        "c/logs: 1 records accepted, 0 quarantined; 1 log files read (1 with a failure "
        in run.output
    )
    row = Warehouse(tmp_path / "wh").read("job_logs", "c").row(0, named=True)
    assert (row["job_key"], row["reason"]) == ("4_2", "cannot load libraries")
    bad = CliRunner().invoke(
        app,
        [
            "ingest",
            "logs",
            "--dir",
            str(logs),
            "--cluster",
            "c",
            "--pattern",
            "(",
            "--data-dir",
            wh,
        ],
    )
    assert "--pattern '(' is not accepted: not a regular expression" in str(bad.exception)
    gone = CliRunner().invoke(
        app, ["ingest", "logs", "--dir", str(tmp_path / "none"), "--cluster", "c", "--data-dir", wh]
    )
    assert "job log folder" in str(gone.exception) and "does not exist" in str(gone.exception)


def test_the_philly_trace_failed_attempts_from_the_trace_itself(demo_warehouse: Path) -> None:
    """The bundled Philly sample has no logs: its failed attempts are its retried attempts and
    the last attempt of Failed and Killed jobs, counted here from the trace file itself (an
    attempt with an interval and GPUs; the job log's times are local, only counts matter)."""
    trace = json.loads((REPO / "sample_data/demo/philly/cluster_job_log").read_text())
    want: dict[tuple[str, int], str] = {}
    for job in trace:
        ran = [
            i for i, a in enumerate(job["attempts"])
            if a["start_time"] not in (None, "None") and a["end_time"] not in (None, "None")
            and any(d.get("gpus") for d in a.get("detail") or [])
        ]  # fmt: skip
        for i in ran:
            if i != ran[-1]:
                want[(job["jobid"], i)] = "no signature"
            elif job["status"] != "Pass":
                want[(job["jobid"], i)] = (
                    "cancelled" if job["status"] == "Killed" else "no signature"
                )
    have = Warehouse(demo_warehouse).read("failure_attempts", "philly-sample")
    got = {(r["job_id"], r["attempt"]): r["reason"] for r in have.iter_rows(named=True)}
    assert got == want and len(want) > 50
    assert set(have["origin"]) == {"none", "scheduler"} and have["line"].null_count() == have.height
