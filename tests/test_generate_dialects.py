"""`gpuwaste generate --telemetry NAME`: the same cluster in every telemetry dialect.

The series are read back through the dialects' declarations (gpuwaste/dialects.py), the scontrol
captures through the real parser, the Jobstats summaries through the real decoder; the readers'
end-to-end run is tests/test_dialects_e2e.py.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from gpuwaste.dialects import BY_NAME, NAMES, Dialect
from gpuwaste.errors import GpuwasteError
from gpuwaste.generate import GeneratorSpec, generate_command, write_all
from gpuwaste.generate.scontrol import capture_times
from gpuwaste.generate.simulate import simulate
from gpuwaste.ingest.slurm.scontrol_parse import parse_scontrol
from gpuwaste.jobstats_summary import decode_summary

SPEC = GeneratorSpec(seed=3, gpus=16, days=0.1)
LINE = re.compile(r"^(\w+)\{(.*)\} (\S+) (\d+)$")
Out = dict[str, Path]


@pytest.fixture(scope="module")
def outs(tmp_path_factory: pytest.TempPathFactory) -> Out:
    root = tmp_path_factory.mktemp("dialects")
    done: Out = {}
    for name in NAMES:
        write_all(GeneratorSpec(**{**SPEC.__dict__, "telemetry": name}), root / name)
        done[name] = root / name
    write_all(GeneratorSpec(**{**SPEC.__dict__, "job_labels": False}), root / "dcgm-nolabels")
    done["dcgm-nolabels"] = root / "dcgm-nolabels"
    return done


def _truth(out: Path) -> dict[str, Any]:
    return dict(json.loads((out / "truth.json").read_text()))


def _samples(out: Path) -> list[tuple[str, dict[str, str], float, int]]:
    rows = []
    for line in (out / "metrics.om").read_text().splitlines():
        m = LINE.match(line)
        if m and not m.group(1).startswith("node_"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
            rows.append((m.group(1), labels, float(m.group(3)), int(m.group(4))))
    return rows


def _host(d: Dialect, labels: dict[str, str]) -> str:
    for name in d.labels.host:
        if name in labels:
            return labels[name]
    return labels["instance"].rsplit(":", 1)[0]


def test_the_truth_is_the_same_in_every_dialect(outs: Out) -> None:
    base = _truth(outs["dcgm"])
    for name, out in outs.items():
        truth = _truth(out)
        assert truth.keys() == base.keys()
        for key in base.keys() - {"telemetry", "openmetrics_samples"}:
            assert truth[key] == base[key], (name, key)
        assert (out / "sacct.txt").read_text().splitlines()[1].split("|")[:16] == (
            (outs["dcgm"] / "sacct.txt").read_text().splitlines()[1].split("|")
        )


def test_minor_numbers_differ_from_the_index_on_some_hosts(outs: Out) -> None:
    truth = _truth(outs["dcgm"])
    swapped = [h for h in truth["hosts"] if any(g["minor"] != g["gpu"] for g in h["gpus"])]
    assert swapped and len(swapped) < len(truth["hosts"])
    minor_of = {(h["name"], g["gpu"]): g["minor"] for h in truth["hosts"] for g in h["gpus"]}
    for name in ("dcgm", "jobstats"):
        d = BY_NAME[name]
        assert d.labels.minor is not None and d.labels.gpu is not None
        for _, labels, _, _ in _samples(outs[name])[:5000]:
            if d.labels.minor in labels:
                key = (_host(d, labels), int(labels[d.labels.gpu]))
                assert labels[d.labels.minor] == f"{d.labels.minor_prefix}{minor_of[key]}"


def test_every_dialect_carries_the_dcgm_values(outs: Out) -> None:
    """Utilization and memory used, converted by the declaration's scale, are DCGM's, sample
    for sample, on the GPUs named by uuid (nvidia-smi, AMD, Jobstats) or by job (slurm-job-
    exporter, whose `gpu` is the job's own index)."""
    ref: dict[tuple[str, str, int], float] = {}
    d = BY_NAME["dcgm"]
    for metric, labels, value, ts in _samples(outs["dcgm"]):
        if metric in (d.util[-1].name, d.mem_used.name):
            what = "util" if metric == d.util[-1].name else "mem"
            ref[(what, labels["UUID"], ts)] = value
    truth = _truth(outs["dcgm"])
    uuid_of = {(h["name"], g["gpu"]): g["uuid"] for h in truth["hosts"] for g in h["gpus"]}
    local = {}  # (job, host, job-local index) -> uuid
    for job in truth["jobs"]:
        by_host = defaultdict(list)
        for a in job["alloc"]:
            by_host[a["host"]].append(a["gpu"])
        for host, idx in by_host.items():
            for rank, i in enumerate(sorted(idx)):
                local[(job["job_id"], host, rank)] = uuid_of[(host, i)]
    for name in NAMES:
        d = BY_NAME[name]
        got = 0
        for metric, labels, value, ts in _samples(outs[name]):
            if metric not in (d.util[-1].name, d.mem_used.name):
                continue
            what, series = (
                ("util", d.util[-1]) if metric == d.util[-1].name else ("mem", d.mem_used)
            )
            if d.gpu_is_job_local:
                assert d.labels.gpu is not None and d.job.labels
                key = (labels[d.job.labels[0]], _host(d, labels), int(labels[d.labels.gpu]))
                uuid = local[key]
            else:
                assert d.labels.uuid is not None
                uuid = labels[d.labels.uuid]
            assert value * series.scale == pytest.approx(ref[(what, uuid, ts)], abs=1e-9)
            got += 1
        allocated = sum(1 for k in ref if k[0] in ("util", "mem"))
        assert got == allocated or (d.gpu_is_job_local and 0 < got < allocated), name


def test_jobs_are_named_as_each_dialect_names_them(outs: Out) -> None:
    truth = _truth(outs["dcgm"])
    ran = {j["job_id"] for j in truth["jobs"] if j["n_samples"]}
    for name in (*NAMES, "dcgm-nolabels"):
        d = BY_NAME[name.removesuffix("-nolabels")]
        by_label: set[str] = set()
        by_gauge: set[str] = set()
        for metric, labels, value, _ in _samples(outs[name]):
            if d.job.labels and d.job.labels[0] in labels:
                by_label.add(labels[d.job.labels[0]])
            if d.job.gauge is not None and metric == d.job.gauge.name and value:
                by_gauge.add(str(int(value)))
        labelled = d.job.source == "label" and name != "dcgm-nolabels"
        assert by_label == (ran if labelled else set()), name
        assert by_gauge == (ran if d.job.gauge else set()), name
        assert (outs[name] / "scontrol").exists() == (not labelled and d.job.gauge is None), name


def test_scontrol_captures_give_the_minor_numbers_of_the_running_jobs(outs: Out) -> None:
    out = outs["dcgm-nolabels"]
    truth = _truth(out)
    cluster = simulate(GeneratorSpec(**{**SPEC.__dict__, "job_labels": False}))
    files = sorted((out / "scontrol").glob("*.txt"))
    assert len(files) == len(capture_times(cluster))
    jobs = {j["job_id"]: j for j in truth["jobs"]}
    seen: set[str] = set()
    for path in files:
        parsed = parse_scontrol(path.read_text(), str(path))
        assert not parsed.refused
        for row in parsed.gpus.iter_rows(named=True):
            job = jobs[row["job_id_raw"]]
            assert row["job_id"] == job["slurm_job_id"]
            assert (row["host"], row["gpu"]) in {(a["host"], a["minor"]) for a in job["alloc"]}
            seen.add(row["job_id_raw"])
    assert seen == set(truth["telemetry"]["captured_jobs"])
    # a job that ran between two captures is in none: exactly those are missing
    t0, end = cluster.spec.t0, cluster.spec.duration_s
    at = [t - t0 for t in capture_times(cluster)]
    missed = {
        j.job_id
        for j in cluster.jobs
        if j.ran and not any(j.start <= c < (end if j.end is None else j.end) for c in at)
    }
    assert missed and {j.job_id for j in cluster.jobs if j.ran} - missed == seen


def test_jobstats_summaries_hold_each_gpus_mean_utilization(outs: Out) -> None:
    truth = _truth(outs["jobstats"])
    lines = (outs["jobstats"] / "sacct.txt").read_text().splitlines()
    assert lines[0].endswith("|AdminComment")
    comments = {f[1]: f[-1] for f in (line.split("|") for line in lines[1:]) if "." not in f[1]}
    util: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    d = BY_NAME["jobstats"]
    for metric, labels, value, _ in _samples(outs["jobstats"]):
        if metric == d.util[-1].name and "jobid" in labels:
            util[(labels["jobid"], _host(d, labels), int(labels["minor_number"]))].append(value)
    decoded = 0
    for job in truth["jobs"]:
        text = comments[job["job_id"]]
        if job["end"] is None or not job["alloc"]:
            assert text == ""
            continue
        if job["n_samples"] < 2:
            assert text == "JS1:Short"
            continue
        summary = decode_summary(text)
        assert summary is not None
        got = {(n.host, g.minor): g.util_pct for n in summary.nodes for g in n.gpus}
        assert set(got) == {(a["host"], a["minor"]) for a in job["alloc"]}
        for (host, minor), pct in got.items():
            values = util[(job["job_id"], host, minor)]
            assert pct == pytest.approx(sum(values) / len(values), abs=0.05)
        decoded += 1
    assert decoded > 10


def test_generate_refuses_what_it_cannot_write(tmp_path: Path) -> None:
    with pytest.raises(GpuwasteError, match=r"^--telemetry bogus is not accepted: .*dcgm"):
        generate_command(tmp_path, gpus=8, days=0.01, telemetry="bogus")
    with pytest.raises(GpuwasteError, match="--no-job-labels is not accepted"):
        generate_command(tmp_path, gpus=8, days=0.01, telemetry="slurm-job-exporter",
                         no_job_labels=True)  # fmt: skip
    with pytest.raises(GpuwasteError, match="--mig-hosts 1 is not accepted"):
        generate_command(tmp_path, gpus=8, days=0.01, telemetry="amd", mig_hosts=1)
    with pytest.raises(GpuwasteError, match=r"^--busy-loops -1 is not accepted: .*0 or more"):
        generate_command(tmp_path, gpus=8, days=0.01, busy_loops=-1)
    with pytest.raises(GpuwasteError, match="--mig-hosts 1 --busy-loops 2 is not accepted: busy"):
        generate_command(tmp_path, gpus=8, days=0.01, mig_hosts=1, busy_loops=2)
    assert not list(tmp_path.iterdir())
