"""`gpuwaste generate`: a plain function the CLI wires up (typer-compatible parameters)."""

from __future__ import annotations

import math
import shutil
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from gpuwaste.columns import byte_size
from gpuwaste.config import check_cluster_name
from gpuwaste.errors import UsageError
from gpuwaste.generate.model import GeneratorSpec
from gpuwaste.generate.output import OUTPUTS, write_all


def parse_start(text: str) -> datetime:
    """ISO 8601; `Z` or an offset is honoured, a naive time is read as UTC."""
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(
            f"--start {text!r} is not accepted: expected an ISO 8601 time such as "
            "2026-10-31T12:00Z."
        ) from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    if t.microsecond:
        raise UsageError(f"--start {text!r} is not accepted: it must be on a whole second.")
    return t


def check_sizes(gpus: int, days: float, interval_s: int) -> None:
    """Each size flag must be a positive, finite number."""
    for flag, value in (("--gpus", gpus), ("--days", days), ("--interval-s", interval_s)):
        if not (math.isfinite(value) and value > 0):
            raise UsageError(
                f"{flag} {value} is not accepted: it must be a finite number greater than 0."
            )


def generate_command(
    out: Path,
    seed: int = 0,
    gpus: int = 32,
    days: float = 1.0,
    interval_s: int = 15,
    start: str | None = None,
    cluster: str = "demo",
    gzip: bool = False,
    policy_cases: bool = False,
    mig_hosts: int = 0,
    shared_gpus: int = 0,
    telemetry: str = "dcgm",
    no_job_labels: bool = False,
    vc_quotas: bool = False,
    logs: bool = False,
    busy_loops: int = 0,
    requeues: int = 0,
    force: bool = False,
) -> None:
    """Generate a synthetic cluster in DIR: metrics.om, sacct.txt, philly/, truth.json (and
    scontrol/ where the telemetry does not name the job)."""
    check_sizes(gpus, days, interval_s)
    counts = (
        ("--mig-hosts", mig_hosts),
        ("--shared-gpus", shared_gpus),
        ("--busy-loops", busy_loops),
        ("--requeues", requeues),
    )
    for flag, n in counts:
        if n < 0:
            raise UsageError(f"{flag} {n} is not accepted: it must be 0 or more.")
    try:
        check_cluster_name(cluster)
    except ValueError as exc:
        raise UsageError(f"--cluster {cluster!r} is not accepted: {exc}.") from None
    try:
        spec = GeneratorSpec(
            seed=seed,
            gpus=gpus,
            days=days,
            interval_s=interval_s,
            cluster=cluster,
            policy_cases=policy_cases,
            mig_hosts=mig_hosts,
            shared_gpus=shared_gpus,
            telemetry=telemetry,
            job_labels=not no_job_labels,
            vc_quotas=vc_quotas,
            busy_loops=busy_loops,
            requeues=requeues,
        )
    except ValueError as exc:
        given = [f"--telemetry {telemetry}"] + [
            flag
            for flag, on in (
                ("--no-job-labels", no_job_labels),
                ("--vc-quotas", vc_quotas),
                (f"--mig-hosts {mig_hosts}", mig_hosts),
                (f"--shared-gpus {shared_gpus}", shared_gpus),
                (f"--busy-loops {busy_loops}", busy_loops),
                (f"--requeues {requeues}", requeues),
            )
            if on
        ]
        raise UsageError(f"{' '.join(given)} is not accepted: {exc}.") from None
    if start is not None:
        spec = replace(spec, start=parse_start(start))
    clear_out(Path(out), force)
    write_all(spec, Path(out), gzip=gzip, logs=logs)
    print(what_was_written(spec, Path(out)))


def clear_out(out: Path, force: bool) -> None:
    """Refuse an --out that already holds something, so that no earlier run's file (a logs/ or
    scontrol/ this run does not write) mixes with this run's cluster; with `force`, remove the
    generator's own earlier outputs first. A name the generator never writes is never removed."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file: give a new or empty folder.")
    entries = sorted(out.iterdir()) if out.exists() else []
    if not entries:
        return
    names = ", ".join(p.name + "/" * p.is_dir() for p in entries)
    if any(p.name not in OUTPUTS for p in entries):
        raise UsageError(
            f"--out {out} holds files that gpuwaste generate does not write ({names}): give a "
            "new or empty folder."
        )
    if not force:
        raise UsageError(
            f"--out {out} already holds an earlier run's output ({names}): give a new or empty "
            "folder, or --force to remove those first."
        )
    for p in entries:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()


def what_was_written(spec: GeneratorSpec, out: Path) -> str:
    """What `generate` wrote: the cluster, its size and window, each file (a folder: its files)
    with its size."""
    extra = [
        f"{n} {what}"
        for n, what in (
            (spec.mig_hosts, "MIG host(s)"),
            (spec.shared_gpus, "time-sliced GPU(s)"),
        )
        if n
    ]
    lines = [
        f"gpuwaste generate: cluster '{spec.cluster}', {spec.gpus} GPUs"
        + "".join(f" + {e}" for e in extra)
        + f", {spec.days:g} day(s) from {spec.start:%Y-%m-%d %H:%M} UTC, a sample every "
        f"{spec.interval_s} s (seed {spec.seed}), written to {out}:"
    ]
    # the generator's names only: clear_out left nothing else, and nothing of an earlier run
    for path in sorted(p for p in out.iterdir() if p.name in OUTPUTS):
        if path.is_dir():
            files = [f for f in path.rglob("*") if f.is_file()]
            size = sum(f.stat().st_size for f in files)
            lines.append(f"  {path.name}/  {len(files)} files, {byte_size(size)}")
        else:
            lines.append(f"  {path.name}  {byte_size(path.stat().st_size)}")
    return "\n".join(lines)
