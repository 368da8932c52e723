"""write_all: every source format of one generated cluster, plus truth.json."""

from __future__ import annotations

import gzip as gzip_mod
import io
from pathlib import Path

from gpuwaste.generate import mig as mig_hosts
from gpuwaste.generate.failure_logs import write_failure_logs
from gpuwaste.generate.jobstats import admin_comments
from gpuwaste.generate.model import Cluster, GeneratorSpec
from gpuwaste.generate.openmetrics import write_openmetrics
from gpuwaste.generate.philly import job_log_text, machine_list_text, philly_view, write_util_files
from gpuwaste.generate.sacct import sacct_text
from gpuwaste.generate.scontrol import write_captures
from gpuwaste.generate.series import gpu_window, host_window
from gpuwaste.generate.simulate import simulate
from gpuwaste.generate.telemetry import names_job
from gpuwaste.generate.truth import truth_dict, truth_text

# Every name write_cluster may write in its folder (files and folders), whatever the flags.
OUTPUTS = ("metrics.om", "metrics.om.gz", "sacct.txt", "philly", "scontrol", "logs", "truth.json")


def write_all(spec: GeneratorSpec, out: Path, *, gzip: bool = False, logs: bool = False) -> None:
    """Write out/metrics.om (or metrics.om.gz) in spec.telemetry's dialect, out/sacct.txt,
    out/philly/*, out/truth.json, and out/scontrol/*.txt where the GPU series do not name the
    job; with `logs`, out/logs/ too (the jobs' stdout/stderr, `failure_logs`). Same spec, same
    bytes."""
    write_cluster(simulate(spec), Path(out), gzip=gzip, logs=logs)


def write_cluster(
    cluster: Cluster, out: Path, *, gzip: bool = False, logs: bool = False
) -> dict[str, int]:
    """As write_all, for a cluster already simulated; returns the OpenMetrics sample counts."""
    out.mkdir(parents=True, exist_ok=True)
    win = gpu_window(cluster)
    host_cpu, host_mem = host_window(cluster, win)
    spec = cluster.spec
    extra_hosts = spec.mig_hosts or spec.shared_gpus
    mig = mig_hosts.plan(spec, spec.mig_hosts, spec.shared_gpus) if extra_hosts else None
    writer = mig_hosts.MigWriter(mig) if mig is not None else None
    if gzip:
        path = out / "metrics.om.gz"
        with (
            path.open("wb") as raw,
            gzip_mod.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=6) as gz,
            io.TextIOWrapper(gz, encoding="utf-8", newline="\n") as fh,
        ):
            counts = write_openmetrics(cluster, fh, win, host_cpu, host_mem, writer)
    else:
        with (out / "metrics.om").open(
            "w", encoding="utf-8", newline="\n", buffering=1 << 22
        ) as fh:
            counts = write_openmetrics(cluster, fh, win, host_cpu, host_mem, writer)
    comments = admin_comments(cluster, win) if spec.telemetry == "jobstats" else None
    sacct = sacct_text(cluster, comments)
    if mig is not None:
        sacct += "\n".join(mig_hosts.sacct_lines(mig)) + "\n"
    (out / "sacct.txt").write_text(sacct, encoding="utf-8")
    pdir = out / "philly"
    pdir.mkdir(exist_ok=True)
    view = philly_view(cluster)
    (pdir / "cluster_job_log").write_text(job_log_text(view), encoding="utf-8")
    row_quirks = write_util_files(cluster, pdir, win, host_cpu, host_mem)
    machines, wrong = machine_list_text(cluster)
    (pdir / "cluster_machine_list").write_text(machines, encoding="utf-8")
    extra: dict[str, object] = {**row_quirks, "machine_list_wrong_gpu_count": wrong}
    truth = truth_dict(cluster, view, extra)
    truth["openmetrics_samples"] = counts
    captured = None if names_job(spec) else write_captures(cluster, out)
    truth["telemetry"] = {
        "dialect": spec.telemetry,
        "job_labels": spec.job_labels,
        # the jobs seen running by at least one scontrol capture (null: no captures written)
        "captured_jobs": captured,
    }
    if mig is not None:
        truth["mig"] = mig_hosts.truth(mig)
    if logs:  # only with the flag: every other output stays as it was
        truth["failure_logs"] = write_failure_logs(cluster, out / "logs")
    (out / "truth.json").write_text(truth_text(truth), encoding="utf-8")
    return counts
