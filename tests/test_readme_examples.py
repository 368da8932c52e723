"""The README's examples, and the demo transcripts the README links to (docs/act.md: a job
report and a notify dry run; docs/analyses.md: a policy replay), run exactly as written on the
bundled demo, print what the page shows.

The warehouse is made as the README says (`gpuwaste demo --no-serve --data-dir gpuwaste-data`,
in a fresh working directory, so the commands' relative `gpuwaste-data` and the default data
directory are that warehouse). Each example's command line is read from its page itself and
run through the shell with this checkout's `gpuwaste` first on PATH; where the page shows the
output, the real output must hold it line for line (a line `[... N more ...]` marks a cut:
the lines after it must still come later, in order).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpuwaste.columns import title
from tests.conftest import REPO

README = (REPO / "README.md").read_text()
ACT = (REPO / "docs" / "act.md").read_text()
ANALYSES = (REPO / "docs" / "analyses.md").read_text()
BIN = Path(sys.executable).parent
CUT = re.compile(r"^\[\.\.\. .*\]$")

pytestmark = pytest.mark.slow


def shell(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PATH": f"{BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "PYTHONPATH": os.environ.get("PYTHONPATH", str(REPO)),
        "COLUMNS": "250",
        "NO_COLOR": "1",
    }
    env.pop("GPUWASTE_CONFIG", None)
    env.pop("GPUWASTE_DATA_DIR", None)
    return subprocess.run(
        ["/bin/sh", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def fenced_block(first_line_start: str, page: str = README) -> list[str]:
    """The lines of the page's fenced block whose first line starts with `first_line_start`."""
    for block in re.findall(r"^```[a-z]*\n(.*?)^```", page, re.S | re.M):
        lines = block.splitlines()
        if lines and lines[0].startswith(first_line_start):
            return lines
    raise AssertionError(f"the page has no block starting with {first_line_start!r}")


def prompted(block: list[str]) -> tuple[str, list[str]]:
    """A `$ command` block: the command (with its `\\` continuation lines) and the output."""
    command = [block[0].removeprefix("$ ")]
    rest = block[1:]
    while command[-1].endswith("\\"):
        command.append(rest.pop(0))
    return "\n".join(command), rest


def assert_shows(shown: list[str], output: str) -> None:
    """Every shown line is a line of `output`, in order; consecutive unless a cut is marked."""
    real = [line.rstrip() for line in output.splitlines()]
    at = 0
    follows = True  # the next shown line must be the very next real line
    for line in (s.rstrip() for s in shown):
        if CUT.match(line.strip()):
            follows = False
            continue
        if follows and at < len(real) and at > 0:
            assert real[at] == line, f"README shows {line!r}, the command prints {real[at]!r}"
            at += 1
            continue
        assert line in real[at:], f"README shows {line!r}, which the command does not print"
        at = real.index(line, at) + 1
        follows = True


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cwd = tmp_path_factory.mktemp("readme")
    done = shell("gpuwaste demo --no-serve --data-dir gpuwaste-data", cwd)
    assert done.returncode == 0, done.stderr
    summary = re.search(r"^    (demo: \d+ jobs, .*)$", README, re.M)
    assert summary is not None
    assert summary.group(1) in done.stdout  # the summary `make demo` prints, as the README says
    return cwd


def test_sql_examples(site: Path) -> None:
    block = fenced_block('gpuwaste sql "select vc, ')
    commands = "\n".join(block).replace("\n                           ", " ").splitlines()
    assert len(commands) == 2
    outputs = []
    for command in commands:
        done = shell(command, site)
        assert done.returncode == 0, (command, done.stderr)
        assert done.stdout.strip()
        outputs.append(done.stdout)
    # The first is "one row per VC": the summaries are split by GPU model (and by kind), so a
    # query that does not pick the roll-up rows shows each VC several times.
    vcs = [line.split("│")[1].strip() for line in outputs[0].splitlines() if line.startswith("│")]
    assert sorted(vcs) == ["(all)", "nlp", "rl", "speech", "vision"], outputs[0]


def test_the_report_column_it_quotes_is_the_reports() -> None:
    """The README quotes `report --by user`'s column of the hours others waited: its title."""
    assert f'--by user`: "{title("others_waited_gpu_h")}"' in " ".join(README.split())


def test_one_cluster_one_name() -> None:
    """The README's ingest example files every source of its cluster under one name: under two,
    one holds GPU time without users or VCs, the other jobs without GPU time."""
    blocks = re.findall(r"^```[a-z]*\n(.*?)^```", README, re.S | re.M)
    ingests = [
        line for b in blocks for line in b.splitlines() if line.startswith("gpuwaste ingest ")
    ]
    names = {m for line in ingests for m in re.findall(r"--cluster (\S+)", line)}
    assert len(ingests) >= 2, ingests
    assert len(names) == 1, names


def test_job_report(site: Path) -> None:
    command, shown = prompted(fenced_block("$ gpuwaste job ", ACT))
    done = shell(command, site)
    assert done.returncode == 0, done.stderr
    assert [line.rstrip() for line in done.stdout.splitlines()] == [s.rstrip() for s in shown]


def transcript(block: list[str]) -> list[tuple[str, list[str]]]:
    """A block of several `$ command` lines, each with the output shown under it."""
    steps: list[tuple[str, list[str]]] = []
    rest = list(block)
    while rest:
        assert rest[0].startswith("$ "), f"expected a command, found {rest[0]!r}"
        end = next((i for i in range(1, len(rest)) if rest[i].startswith("$ ")), len(rest))
        steps.append(prompted(rest[:end]))
        rest = rest[end:]
    return steps


def test_notify_dry_run_with_prices(site: Path, tmp_path: Path) -> None:
    """docs/act.md's config file (shown by `cat`), the analyze that prices every job, then the
    dry run, in a copy of the site (the job report above is the one without prices)."""
    steps = transcript(fenced_block("$ cat gpuwaste.toml", ACT))
    assert [c.split()[:2] for c, _ in steps] == [
        ["cat", "gpuwaste.toml"],
        ["gpuwaste", "analyze"],
        ["gpuwaste", "notify"],
    ]
    priced = tmp_path / "site"
    shutil.copytree(site, priced)
    (priced / "gpuwaste.toml").write_text("\n".join(steps[0][1]) + "\n")
    for command, shown in steps:
        done = shell(command, priced)
        assert done.returncode == 0, (command, done.stderr)
        assert_shows(shown, done.stdout)
    # "With the same prices, `gpuwaste job 107394` adds a line to its header: `money lost ...`"
    said = re.search(r"With the same prices, `(gpuwaste job \d+)` adds .*?: `(money lost [^`]*)`",
                     " ".join(ACT.split()))  # fmt: skip
    assert said is not None
    done = shell(said.group(1), priced)
    assert said.group(2) in done.stdout.splitlines(), done.stdout


def test_policy_replay_table(site: Path) -> None:
    (command,) = fenced_block("gpuwaste policy replay ", ANALYSES)
    after = ANALYSES.split(f"{command}\n```\n", 1)[1]
    table = re.match(r"\n((?:    .*\n)+)", after)
    assert table is not None, "the replay table follows the command, indented"
    shown = [line.removeprefix("    ") for line in table.group(1).splitlines()]
    done = shell(command, site)
    assert done.returncode == 0, done.stderr
    assert_shows(
        [line.strip() for line in shown], "\n".join(x.strip() for x in done.stdout.splitlines())
    )
