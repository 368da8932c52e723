"""The scheduling examples in deploy/ keep results fresh: each one's command line, read from the
shipped file and run for real (paths moved into a temporary folder), ingests and then analyzes.
With a second cluster whose source keeps failing, analyze still runs for the first, and the run
fails (exit status not 0).

systemd: the service's Environment/EnvironmentFile and its ExecStart lines in order, stopping at
the first failure as systemd does for a oneshot (`$$` is systemd's `$`); cron: the job line's
command under the file's SHELL; Kubernetes: the CronJob container's command and args, with its env.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpuwaste.generate.cli import generate_command
from gpuwaste.warehouse.catalog import connect
from tests.conftest import REPO

DEPLOY = REPO / "deploy"
SERVICE = DEPLOY / "systemd" / "gpuwaste-update.service"
TIMER = DEPLOY / "systemd" / "gpuwaste-update.timer"
CRON = DEPLOY / "cron" / "gpuwaste-update.cron"
CRONJOB = DEPLOY / "kubernetes" / "gpuwaste-update-cronjob.yaml"
GPUWASTE = Path(sys.executable).parent / "gpuwaste"
INSTALLED = "/opt/gpuwaste/.venv/bin/gpuwaste"


@dataclass(frozen=True)
class Site:
    """A machine's folders for the examples, under a temporary root; `broken`: its config also
    names a cluster whose sacct file is missing (a source that keeps failing)."""

    root: Path
    data_dir: Path
    broken: bool = False

    def local(self, text: str) -> str:
        """The example's text with its paths moved under `root` and the installed binary
        replaced by this checkout's."""
        text = text.replace(INSTALLED, str(GPUWASTE))
        for folder in ("/etc/gpuwaste/", "/var/lib/gpuwaste/", "/var/log/gpuwaste/"):
            text = text.replace(folder, f"{self.root}{folder}")
        return text

    def env(self, extra: dict[str, str]) -> dict[str, str]:
        return {
            "PATH": f"{GPUWASTE.parent}:/usr/bin:/bin",
            "PYTHONPATH": os.environ.get("PYTHONPATH", str(REPO)),
            "HOME": str(self.root),
            **{k: self.local(v) for k, v in extra.items()},
        }


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cluster")
    generate_command(out, seed=5, gpus=8, days=0.1)
    return out


@pytest.fixture(params=[False, True], ids=["sources-ok", "one-source-failing"])
def site(request: pytest.FixtureRequest, tmp_path: Path, inputs: Path) -> Site:
    """/etc/gpuwaste/{gpuwaste.toml,ingest.env}, /var/lib/gpuwaste, /var/log/gpuwaste, as the
    examples expect them, with one cluster read from files (no server needed), and in the
    failing case a second cluster whose sacct file does not exist."""
    etc = tmp_path / "etc" / "gpuwaste"
    etc.mkdir(parents=True)
    data_dir = tmp_path / "var" / "lib" / "gpuwaste" / "data"
    data_dir.parent.mkdir(parents=True)
    (tmp_path / "var" / "log" / "gpuwaste").mkdir(parents=True)
    (etc / "gpuwaste.toml").write_text(
        f'data_dir = "{data_dir}"\n'
        '[[clusters]]\nname = "gen"\n'
        f'[clusters.openmetrics]\nfile = "{inputs / "metrics.om"}"\n'
        f'[clusters.slurm]\nfile = "{inputs / "sacct.txt"}"\n'
        + (
            '[[clusters]]\nname = "lost"\n'
            f'[clusters.slurm]\nfile = "{tmp_path / "no-such-sacct.txt"}"\n'
            if request.param
            else ""
        )
    )
    (etc / "ingest.env").write_text("PROMETHEUS_TOKEN=not-a-real-token\n")
    return Site(tmp_path, data_dir, broken=request.param)


def assert_ingested_then_analyzed(site: Site, returncode: int, output: str) -> None:
    """The warehouse started empty: jobs and samples come from ingest, per-job results from an
    analyze that ran after it; the run succeeded, or, with a failing source, failed and said
    which (and the other cluster was analyzed all the same)."""
    if site.broken:
        assert returncode != 0, output
        assert "no-such-sacct.txt" in output, output
    else:
        assert returncode == 0, output
    con = connect(site.data_dir)
    jobs = con.sql("select count(*) from jobs").fetchall()[0][0]
    samples = con.sql("select count(*) from gpu_samples").fetchall()[0][0]
    analyzed = con.sql("select count(*) from job_usage").fetchall()[0][0]
    unknown = con.sql(
        "select count(*) from job_usage u anti join jobs j using (cluster, job_id)"
    ).fetchall()[0][0]
    assert jobs > 0 and samples > 0, "ingest did not run"
    assert analyzed > 0, "analyze did not run after ingest: results are stale"
    assert unknown == 0


# ------------------------------------------------------------------------------------ systemd
def unit_section(path: Path, section: str) -> list[tuple[str, str]]:
    """(key, value) lines of one section of a unit file, in order."""
    entries: list[tuple[str, str]] = []
    current = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = line.strip("[]")
            continue
        if current == section:
            key, _, value = line.partition("=")
            entries.append((key.strip(), value.strip()))
    return entries


def systemd_environment(service: list[tuple[str, str]], site: Site) -> dict[str, str]:
    env: dict[str, str] = {}
    for key, value in service:
        if key == "EnvironmentFile":
            path = Path(site.local(value.removeprefix("-")))
            if path.is_file():
                for line in path.read_text().splitlines():
                    name, sep, val = line.partition("=")
                    if sep and not name.startswith("#"):
                        env[name.strip()] = val.strip()
        elif key == "Environment":
            for assignment in shlex.split(value):
                name, _, val = assignment.partition("=")
                env[name] = val
    return env


def test_systemd_service_ingests_then_analyzes(site: Site) -> None:
    service = unit_section(SERVICE, "Service")
    assert ("Type", "oneshot") in service  # a oneshot runs its ExecStart lines in order
    starts = [value for key, value in service if key == "ExecStart"]
    commands = [shlex.split(site.local(v.lstrip("-@:+!")).replace("$$", "$")) for v in starts]
    text = " ".join(" ".join(c) for c in commands)
    assert text.index(" ingest ") < text.index(" analyze ")
    env = site.env(systemd_environment(service, site))
    assert env["PROMETHEUS_TOKEN"] == "not-a-real-token"  # from the EnvironmentFile
    returncode, output = 0, ""
    for argv in commands:  # in order, stopping at the first failure, as systemd does
        done = subprocess.run(
            argv, capture_output=True, text=True, env=env, cwd=site.root, timeout=600
        )
        returncode, output = done.returncode, output + done.stdout + done.stderr
        if returncode:
            break
    assert_ingested_then_analyzed(site, returncode, output)


def test_systemd_timer_starts_the_service() -> None:
    timer = dict(unit_section(TIMER, "Timer"))
    # With no Unit=, a timer starts the service of its own name.
    assert timer.get("Unit", TIMER.with_suffix(".service").name) == SERVICE.name
    assert SERVICE.is_file() and "OnUnitActiveSec" in timer


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not found")
def test_systemd_units_verify(tmp_path: Path) -> None:
    for unit in (SERVICE, TIMER):
        (tmp_path / unit.name).write_text(unit.read_text().replace(INSTALLED, str(GPUWASTE)))
    checked = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", SERVICE.name, TIMER.name],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert checked.returncode == 0, checked.stderr


# --------------------------------------------------------------------------------------- cron
def cron_job(path: Path) -> tuple[dict[str, str], str]:
    """The file's variable lines and the command of its one job line (/etc/cron.d format:
    five time fields, the user, the command)."""
    variables: dict[str, str] = {}
    jobs: list[str] = []
    for line in path.read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", line):
            name, _, value = line.partition("=")
            variables[name] = value
        else:
            jobs.append(line)
    assert len(jobs) == 1, jobs
    fields = jobs[0].split(None, 6)
    assert len(fields) == 7 and fields[5] == "gpuwaste", fields
    return variables, fields[6]


def test_cron_line_ingests_then_analyzes(site: Site) -> None:
    variables, command = cron_job(CRON)
    shell = variables.get("SHELL", "/bin/sh")
    done = subprocess.run(
        [shell, "-c", site.local(command)],
        capture_output=True,
        text=True,
        env=site.env({}),
        cwd=site.root,
        timeout=600,
    )
    log = next((site.root / "var" / "log" / "gpuwaste").iterdir()).read_text()
    assert "Traceback" not in log
    assert_ingested_then_analyzed(site, done.returncode, done.stdout + done.stderr + log)


# --------------------------------------------------------------------------------- Kubernetes
def container_fields(path: Path) -> tuple[list[str], list[str], dict[str, str]]:
    """The one container's `command` and `args` (flow sequences, JSON-compatible) and its plain
    `env` values, read without a YAML library."""
    text = path.read_text()
    lists = {
        key: json.loads(value)
        for key, value in re.findall(r"^\s+(command|args):\s*(\[.*\])\s*$", text, re.M)
    }
    assert len(re.findall(r"^\s+(?:command|args):", text, re.M)) == len(lists) == 2
    env = dict(re.findall(r"^\s+- name: (\w+)\n\s+value: (\S+)\s*$", text, re.M))
    secrets = re.findall(r"^\s+- name: (\w+)\n\s+valueFrom:", text, re.M)
    return lists["command"], lists["args"], {**env, **{s: "from-a-secret" for s in secrets}}


def test_kubernetes_cronjob_ingests_then_analyzes(site: Site) -> None:
    command, args, env = container_fields(CRONJOB)
    assert "GPUWASTE_CONFIG" in env and "PROMETHEUS_TOKEN" in env
    argv = [site.local(a) for a in [*command, *args]]
    done = subprocess.run(
        argv, capture_output=True, text=True, env=site.env(env), cwd=site.root, timeout=600
    )
    assert_ingested_then_analyzed(site, done.returncode, done.stdout + done.stderr)


def test_readme_and_docs_name_the_shipped_examples() -> None:
    # The scheduled-update examples (deploy/prometheus, grafana and spark hold other things).
    update_dirs = ("cron", "systemd", "kubernetes")
    shipped = {
        p.relative_to(REPO).as_posix()
        for d in update_dirs
        for p in (DEPLOY / d).rglob("*")
        if p.is_file()
    }
    assert not [p for p in DEPLOY.rglob("*") if "gpuwaste-ingest" in p.name]
    assert shipped == {
        "deploy/systemd/gpuwaste-update.service",
        "deploy/systemd/gpuwaste-update.timer",
        "deploy/cron/gpuwaste-update.cron",
        "deploy/kubernetes/gpuwaste-update-cronjob.yaml",
    }
    for doc in (REPO / "README.md", REPO / "docs" / "ingest-prometheus.md"):
        text = doc.read_text()
        assert "gpuwaste-ingest." not in text and "gpuwaste-ingest-" not in text, doc
    _, command = cron_job(CRON)
    assert command in (REPO / "docs" / "ingest-prometheus.md").read_text()
